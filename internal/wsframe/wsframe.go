// Package wsframe is the layout of an unmasked server-to-client WebSocket frame (RFC 6455
// §5.2), shared by the transport that writes frames (ws) and the packages that keep or
// rewrite pre-framed broadcasts (channels' history). It imports nothing of this module.
package wsframe

import "encoding/binary"

// OpText is the text frame opcode.
const OpText = 0x1

// AppendFrame appends a FIN frame with the given opcode and payload to dst: a complete,
// unmasked server-to-client frame.
func AppendFrame(dst []byte, opcode byte, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, 0x80|opcode)
	switch {
	case n < 126:
		dst = append(dst, byte(n))
	case n <= 0xFFFF:
		dst = append(dst, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, 127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, payload...)
}

// TextHeaderRoom is the room to leave in front of a payload for TextFrameInPlace: the
// largest server frame header.
const TextHeaderRoom = 10

// TextFrameInPlace frames as one text message the payload written at buf[TextHeaderRoom:],
// writing the header into the room before it: the frame shares buf, with no second buffer
// and no copy.
func TextFrameInPlace(buf []byte) []byte {
	n := len(buf) - TextHeaderRoom
	var h int
	switch {
	case n < 126:
		h = 2
	case n <= 0xFFFF:
		h = 4
	default:
		h = 10
	}
	f := buf[TextHeaderRoom-h:]
	f[0] = 0x80 | OpText
	switch h {
	case 2:
		f[1] = byte(n)
	case 4:
		f[1], f[2], f[3] = 126, byte(n>>8), byte(n)
	default:
		f[1] = 127
		binary.BigEndian.PutUint64(f[2:10], uint64(n))
	}
	return f
}

// Payload is an unmasked server frame's payload (nil if f is not exactly one such frame).
func Payload(f []byte) []byte {
	if len(f) < 2 {
		return nil
	}
	n, h := int(f[1]&0x7f), 2
	switch n {
	case 126:
		if len(f) < 4 {
			return nil
		}
		n, h = int(f[2])<<8|int(f[3]), 4
	case 127:
		if len(f) < 10 {
			return nil
		}
		n = 0
		for _, b := range f[2:10] {
			n = n<<8 | int(b)
		}
		h = 10
	}
	if h+n != len(f) {
		return nil
	}
	return f[h:]
}
