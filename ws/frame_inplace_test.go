package ws

import (
	"bytes"
	"strings"
	"testing"
)

// TestTextFrameInPlace: the in-place frame is byte for byte AppendTextFrame's, at every
// header size (7-bit, 16-bit and 64-bit lengths and their edges).
func TestTextFrameInPlace(t *testing.T) {
	for _, n := range []int{0, 1, 125, 126, 127, 0xFFFF, 0x10000, 70000} {
		payload := []byte(strings.Repeat("x", n))
		buf := append(make([]byte, TextHeaderRoom, TextHeaderRoom+n), payload...)
		got := TextFrameInPlace(buf)
		want := AppendTextFrame(nil, payload)
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: in-place frame differs from AppendTextFrame (len %d vs %d)", n, len(got), len(want))
		}
	}
}
