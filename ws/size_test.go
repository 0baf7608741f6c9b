package ws

import (
	"testing"
	"unsafe"
)

// TestConnSize keeps a Conn within the 352-byte size class (issue 25: memory per idle
// connection is a product figure); a new field must find room or shrink another.
func TestConnSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		size uintptr
		max  uintptr
	}{
		{"Conn", unsafe.Sizeof(Conn{}), 352},
	} {
		if tc.size > tc.max {
			t.Errorf("%s is %d bytes, want at most %d (the next size class costs every connection)", tc.name, tc.size, tc.max)
		}
	}
}
