package pusher

import "encoding/binary"

// WebSocket opcodes (RFC 6455 §5.2) used by the server-side writer.
const (
	opText  = 0x1
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// Frame is one complete server-to-client WebSocket frame: header and unmasked payload.
// A broadcast is framed once and the same bytes are queued on every subscriber, so the
// writer only copies bytes into the kernel (several frames per writev).
type Frame []byte

// AppendFrame appends a FIN frame with the given opcode and payload to dst.
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

// TextFrame frames payload as one text message.
func TextFrame(payload []byte) Frame {
	return AppendFrame(make([]byte, 0, len(payload)+10), opText, payload)
}

// closeFrame builds a close frame carrying code and a reason (truncated to fit 125 bytes).
func closeFrame(code int, reason string) Frame {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	p := make([]byte, 2, 2+len(reason))
	binary.BigEndian.PutUint16(p, uint16(code))
	p = append(p, reason...)
	return AppendFrame(nil, opClose, p)
}
