package pusher

import (
	"bytes"
	"encoding/binary"

	"github.com/reverbgo/reverbgo/ws"
)

// clientFrame builds a masked client frame; first carries FIN|RSV|opcode as is.
func clientFrame(first byte, payload []byte, mask bool) []byte {
	n := len(payload)
	b := []byte{first}
	mbit := byte(0)
	if mask {
		mbit = 0x80
	}
	switch {
	case n < 126:
		b = append(b, mbit|byte(n))
	case n <= 0xFFFF:
		b = append(b, mbit|126, byte(n>>8), byte(n))
	default:
		b = append(b, mbit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !mask {
		return append(b, payload...)
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

func text(s string) []byte { return clientFrame(0x80|ws.OpText, []byte(s), true) }

func cat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
