package ws

import (
	"testing"
	"unicode/utf8"
)

// The streaming validator agrees with utf8.Valid on the whole message however it is cut,
// and rejects an invalid message no later than the piece holding the first bad byte.
func TestUTF8Stream(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"ascii", "hello"},
		{"empty", ""},
		{"two byte", "héllo"},
		{"three byte", "€uro €"},
		{"four byte", "a😀b😀"},
		{"replacement char", "\uFFFD"},
		{"max code point", "\U0010FFFF"},
		{"lone continuation", "a\x80b"},
		{"truncated at end", "a\xe2\x82"},
		{"overlong", "\xc0\xaf"},
		{"surrogate", "\xed\xa0\x80"},
		{"above max", "\xf4\x90\x80\x80"},
		{"invalid lead", "ab\xffcd"},
		{"bad second byte", "\xe2\x28\xa1"},
		{"four byte cut then bad", "\xf0\x9f\x98\x41"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.in)
			want := utf8.Valid(in)
			firstBad := len(in) // smallest prefix length that is not a valid prefix
			for k := 0; k <= len(in); k++ {
				if !validPrefix(in[:k]) {
					firstBad = k
					break
				}
			}
			check := func(cuts []int) {
				var u utf8Stream
				prev := 0
				for i, c := range append(cuts, len(in)) {
					ok := u.write(in[prev:c], i == len(cuts))
					if !ok {
						if want {
							t.Fatalf("cuts %v: rejected valid input at piece %d", cuts, i)
						}
						if c < firstBad {
							t.Fatalf("cuts %v: rejected at %d before the first bad byte (%d)", cuts, c, firstBad)
						}
						return
					}
					if c >= firstBad && firstBad < len(in) {
						t.Fatalf("cuts %v: accepted %d bytes past the first bad byte at %d", cuts, c, firstBad)
					}
					prev = c
				}
				if !want {
					t.Fatalf("cuts %v: accepted invalid input", cuts)
				}
			}
			check(nil)
			for a := 0; a <= len(in); a++ {
				check([]int{a})
				for b := a; b <= len(in); b++ {
					check([]int{a, b})
				}
			}
			bytewise := make([]int, 0, len(in))
			for i := 1; i < len(in); i++ {
				bytewise = append(bytewise, i)
			}
			check(bytewise)
		})
	}
}

// validPrefix reports whether p can be extended to valid UTF-8 (the reference for the
// "as soon as it is seen" rule).
func validPrefix(p []byte) bool {
	for k := 0; k < utf8.UTFMax; k++ {
		if len(p) >= k {
			head, tail := p[:len(p)-k], p[len(p)-k:]
			if utf8.Valid(head) && (k == 0 || !utf8.FullRune(tail)) {
				return true
			}
		}
	}
	return false
}

func FuzzUTF8Stream(f *testing.F) {
	f.Add([]byte("h€llo😀"), uint8(1))
	f.Add([]byte("a\xe2\x82"), uint8(2))
	f.Add([]byte("\xed\xa0\x80"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		size := int(piece%7) + 1
		var u utf8Stream
		ok := true
		for i := 0; i < len(in) && ok; i += size {
			end := min(i+size, len(in))
			ok = u.write(in[i:end], end == len(in))
		}
		if len(in) == 0 {
			ok = u.write(nil, true)
		}
		if ok != utf8.Valid(in) {
			t.Fatalf("pieces of %d: %v, utf8.Valid %v", size, ok, utf8.Valid(in))
		}
	})
}
