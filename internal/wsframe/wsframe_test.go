package wsframe

import (
	"bytes"
	"testing"
)

// TestFrames: every header size (7-bit, 16-bit and 64-bit lengths) frames the same bytes in
// place as appended, and Payload reads the payload back; anything else is not a frame.
func TestFrames(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 0xFFFF, 0x10000} {
		p := bytes.Repeat([]byte{'x'}, n)
		f := AppendFrame(nil, OpText, p)
		buf := append(make([]byte, TextHeaderRoom), p...)
		if in := TextFrameInPlace(buf); !bytes.Equal(in, f) {
			t.Fatalf("%d bytes: in place %x, appended %x", n, in[:min(len(in), 12)], f[:min(len(f), 12)])
		}
		if got := Payload(f); !bytes.Equal(got, p) || got == nil {
			t.Fatalf("%d bytes: payload of %d", n, len(got))
		}
		if Payload(f[:len(f)-1]) != nil && n > 0 {
			t.Fatalf("%d bytes: a truncated frame has a payload", n)
		}
	}
	for _, f := range [][]byte{nil, {0x81}, {0x81, 126, 0}, {0x81, 127, 0, 0}, {0x81, 1}} {
		if Payload(f) != nil {
			t.Fatalf("payload of %x", f)
		}
	}
}
