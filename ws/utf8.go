package ws

import "unicode/utf8"

// utf8Stream validates a text message as UTF-8 piece by piece (RFC 6455 §8.1): a code
// point may be split across fragments or reads, and an invalid sequence is reported in the
// piece where it appears, not once the whole message has arrived. It carries at most the
// three bytes of an incomplete code point between pieces.
type utf8Stream struct {
	carry [utf8.UTFMax]byte
	n     uint8
}

// write validates the next piece; final says the message ends with it. It reports false
// as soon as the bytes so far cannot be the prefix of valid UTF-8 (or, when final, are
// not valid UTF-8).
func (u *utf8Stream) write(p []byte, final bool) bool {
	if u.n > 0 {
		for len(p) > 0 && !utf8.FullRune(u.carry[:u.n]) {
			u.carry[u.n] = p[0]
			u.n++
			p = p[1:]
		}
		if !utf8.FullRune(u.carry[:u.n]) { // still incomplete: FullRune false means a valid prefix
			if final {
				u.n = 0
				return false
			}
			return true
		}
		r, size := utf8.DecodeRune(u.carry[:u.n])
		ok := !(r == utf8.RuneError && size == 1) && size == int(u.n)
		u.n = 0
		if !ok {
			return false
		}
	}
	tail := len(p)
	for i := len(p) - 1; i >= 0 && i >= len(p)-(utf8.UTFMax-1); i-- {
		if p[i]&0xC0 != 0x80 { // the last lead byte: is its sequence cut off?
			if !utf8.FullRune(p[i:]) {
				tail = i
			}
			break
		}
	}
	if !utf8.Valid(p[:tail]) {
		return false
	}
	if tail < len(p) {
		if final {
			return false
		}
		u.n = uint8(copy(u.carry[:], p[tail:]))
	}
	return true
}
