package ws

import (
	"encoding/binary"
	"unicode/utf8"
)

// Close codes (RFC 6455 §7.4.1): the parser answers protocol violations with the last three.
const (
	CloseNormal         = 1000
	CloseProtocolError  = 1002
	CloseInvalidPayload = 1007
	CloseTooBig         = 1009
)

// MaxControlPayload is the largest payload of a control frame (RFC 6455 §5.5).
const MaxControlPayload = 125

// feedStop is what feed returns when the handler asked it to stop (after a close frame).
const feedStop = -1

// frameHandler receives what the parser decodes. payload is only valid during the call:
// it points into the poller's read buffer or the connection's partial-frame buffer.
type frameHandler interface {
	// onFrame is called for every complete frame: with op text or binary and the whole
	// message once the final fragment arrives, with OpContinuation and a nil payload for a
	// non-final fragment (so the caller can record activity), and with each control frame.
	// Returning false stops the parser (the connection is ending).
	onFrame(op byte, payload []byte) bool
}

// frameReader parses RFC 6455 client-to-server frames from a byte stream delivered in
// arbitrary pieces. Between frames it holds no buffer: partial is allocated only while a
// frame is split across reads and msg only while a fragmented message is incomplete, so
// an idle connection costs nothing but this struct.
type frameReader struct {
	partial []byte     // the bytes of the frame being received; nil between frames
	msg     []byte     // payload of the fragmented message so far
	msgOp   byte       // opcode of the fragmented message in progress, 0 if none
	inMsg   bool       // a fragmented message is in progress
	text    utf8Stream // a fragmented text message's code point cut between fragments
	deflate bool       // permessage-deflate negotiated: RSV1 marks a compressed message
	zipped  bool       // the fragmented message in progress is compressed (deflate_read.go)
}

// frameHeader is a decoded frame header.
type frameHeader struct {
	fin    bool
	rsv1   bool // a compressed message's first frame (permessage-deflate)
	op     byte
	mask   [4]byte
	length int // payload length
	size   int // header length
}

// headerNeed reports how many bytes the header starting at b needs, from its first two
// bytes (2 while fewer are known).
func headerNeed(b []byte) int {
	if len(b) < 2 {
		return 2
	}
	switch b[1] & 0x7F {
	case 126:
		return 2 + 2 + 4
	case 127:
		return 2 + 8 + 4
	}
	return 2 + 4
}

// check validates the first two header bytes against the RFC and the parser's state; it
// returns a close code or 0.
func (r *frameReader) check(b0, b1 byte) int {
	if b0&0x70 != 0 && !r.rsvAllowed(b0) { // RSV1 only for permessage-deflate (deflate_read.go)
		return CloseProtocolError
	}
	if b1&0x80 == 0 { // clients must mask (RFC 6455 §5.1)
		return CloseProtocolError
	}
	fin := b0&0x80 != 0
	switch op := b0 & 0x0F; op {
	case OpContinuation:
		if !r.inMsg {
			return CloseProtocolError
		}
	case OpText, OpBinary:
		if r.inMsg {
			return CloseProtocolError
		}
	case OpClose, OpPing, OpPong:
		if !fin || b1&0x7F > MaxControlPayload {
			return CloseProtocolError
		}
	default:
		return CloseProtocolError
	}
	return 0
}

// parseHeader decodes a complete header (len(b) >= headerNeed(b)); it returns a close
// code for an invalid one. limit bounds a data message's total payload (<= 0: no limit).
func (r *frameReader) parseHeader(b []byte, limit int) (frameHeader, int) {
	var h frameHeader
	if code := r.check(b[0], b[1]); code != 0 {
		return h, code
	}
	h.fin = b[0]&0x80 != 0
	h.rsv1 = b[0]&0x40 != 0
	h.op = b[0] & 0x0F
	n := uint64(b[1] & 0x7F)
	p := 2
	switch n {
	case 126:
		n = uint64(binary.BigEndian.Uint16(b[2:]))
		p = 4
	case 127:
		n = binary.BigEndian.Uint64(b[2:])
		p = 10
		if n>>63 != 0 {
			return h, CloseProtocolError
		}
	}
	if h.op < OpClose && limit > 0 && n > uint64(limit-len(r.msg)) {
		return h, CloseTooBig // as gorilla's read limit: the message so far plus this frame
	}
	if n > 1<<31 { // unreachable with a limit; keeps int conversions safe without one
		return h, CloseTooBig
	}
	copy(h.mask[:], b[p:p+4])
	h.length = int(n)
	h.size = p + 4
	return h, 0
}

// feed parses data. It returns 0 when data was consumed (possibly leaving a partial frame
// buffered), feedStop when the handler stopped it, or a close code for a protocol
// violation (1002), text that is not UTF-8 (1007) or an oversized message (1009, decided
// from the header before the payload is buffered); after a non-zero result the
// connection must end. data is unmasked in place.
func (r *frameReader) feed(data []byte, limit int, h frameHandler) int {
	if r.partial != nil {
		var res int
		if data, res = r.feedPartial(data, limit, h); res != 0 || r.partial != nil {
			return res
		}
	}
	for len(data) > 0 {
		need := headerNeed(data)
		if len(data) < need {
			if len(data) >= 2 {
				if code := r.check(data[0], data[1]); code != 0 {
					return code
				}
			}
			r.partial = append(make([]byte, 0, 14), data...)
			return 0
		}
		hdr, code := r.parseHeader(data, limit)
		if code != 0 {
			return code
		}
		total := hdr.size + hdr.length
		if len(data) < total {
			r.partial = append(make([]byte, 0, total), data...)
			return 0
		}
		if res := r.frame(hdr, data[hdr.size:total], limit, h); res != 0 {
			return res
		}
		data = data[total:]
	}
	return 0
}

// feedPartial completes the buffered frame from data and returns what is left of data.
// r.partial stays non-nil while the frame is still incomplete.
func (r *frameReader) feedPartial(data []byte, limit int, h frameHandler) ([]byte, int) {
	for {
		need := headerNeed(r.partial)
		if len(r.partial) >= need {
			hdr, code := r.parseHeader(r.partial, limit)
			if code != 0 {
				return nil, code
			}
			need = hdr.size + hdr.length
			if len(r.partial) == need {
				frame := r.partial
				r.partial = nil
				return data, r.frame(hdr, frame[hdr.size:], limit, h)
			}
			if cap(r.partial) < need {
				r.partial = append(make([]byte, 0, need), r.partial...)
			}
		} else if len(r.partial) >= 2 {
			if code := r.check(r.partial[0], r.partial[1]); code != 0 {
				return nil, code
			}
		}
		if len(data) == 0 {
			return nil, 0
		}
		k := min(need-len(r.partial), len(data))
		r.partial = append(r.partial, data[:k]...)
		data = data[k:]
	}
}

// frame handles one complete frame whose payload is still masked. Text is validated as
// UTF-8 fragment by fragment, so an invalid byte ends the connection (1007) in the frame
// that carries it, while a code point split between fragments is fine.
func (r *frameReader) frame(hdr frameHeader, payload []byte, limit int, h frameHandler) int {
	unmask(payload, hdr.mask)
	op := hdr.op
	if op < OpClose && (hdr.rsv1 || r.zipped) {
		return r.compressedFrame(hdr, payload, limit, h)
	}
	switch {
	case op >= OpClose:
		if op == OpClose && !validClosePayload(payload) {
			return CloseProtocolError
		}
	case op == OpContinuation:
		if r.msgOp == OpText && !r.text.write(payload, hdr.fin) {
			return CloseInvalidPayload
		}
		r.msg = append(r.msg, payload...)
		if !hdr.fin {
			payload = nil
			break
		}
		op, payload = r.msgOp, r.msg
		r.msg, r.msgOp, r.inMsg = nil, 0, false
	case !hdr.fin: // first fragment of a message
		if op == OpText && !r.text.write(payload, false) {
			return CloseInvalidPayload
		}
		r.msg = append(make([]byte, 0, 2*len(payload)+64), payload...)
		r.msgOp, r.inMsg = op, true
		op, payload = OpContinuation, nil
	case op == OpText:
		if !utf8.Valid(payload) {
			return CloseInvalidPayload
		}
	}
	if !h.onFrame(op, payload) {
		return feedStop
	}
	return 0
}

// validClosePayload checks a received close frame (RFC 6455 §5.5.1, §7.4): no body, or a
// status code the peer may send followed by a UTF-8 reason.
func validClosePayload(p []byte) bool {
	if len(p) == 0 {
		return true
	}
	if len(p) == 1 {
		return false // a body must start with a two-byte code
	}
	code := int(binary.BigEndian.Uint16(p))
	switch {
	case code >= 3000 && code <= 4999:
	case code >= 1000 && code <= 1003, code >= 1007 && code <= 1014:
	default:
		return false
	}
	return utf8.Valid(p[2:])
}

// unmask XORs p with the frame's masking key, eight bytes at a time where it can.
func unmask(p []byte, key [4]byte) {
	if len(p) >= 8 {
		k := uint64(binary.LittleEndian.Uint32(key[:]))
		k |= k << 32
		for len(p) >= 8 {
			binary.LittleEndian.PutUint64(p, binary.LittleEndian.Uint64(p)^k)
			p = p[8:]
		}
	}
	for i := range p {
		p[i] ^= key[i&3]
	}
}
