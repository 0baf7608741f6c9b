package ws

import (
	"errors"
	"sync"
	"unicode/utf8"
)

// rsvAllowed reports whether a frame's RSV bits are legal: RSV1 only, on the first frame
// of a text or binary message, and only on a connection that negotiated permessage-deflate
// (RFC 7692 §6: never on a control frame or a continuation). RSV2 and RSV3 never are.
func (r *frameReader) rsvAllowed(b0 byte) bool {
	op := b0 & 0x0F
	return r.deflate && b0&0x30 == 0 && (op == OpText || op == OpBinary)
}

// compressedFrame handles a data frame of a compressed message (its first frame had RSV1):
// fragments are kept compressed (the header check bounds their total by the read limit)
// and the whole message is inflated once its last fragment arrived.
func (r *frameReader) compressedFrame(hdr frameHeader, payload []byte, limit int, h frameHandler) int {
	switch {
	case hdr.op == OpContinuation:
		r.msg = append(r.msg, payload...)
		if !hdr.fin {
			break
		}
		op, msg := r.msgOp, r.msg
		r.msg, r.msgOp, r.inMsg, r.zipped = nil, 0, false, false
		return deliverInflated(op, msg, limit, h)
	case !hdr.fin: // the first fragment
		r.msg = append(make([]byte, 0, 2*len(payload)+64), payload...)
		r.msgOp, r.inMsg, r.zipped = hdr.op, true, true
	default:
		return deliverInflated(hdr.op, payload, limit, h)
	}
	if !h.onFrame(OpContinuation, nil) {
		return feedStop
	}
	return 0
}

// inflateBufs holds output buffers for inflated messages (a Session keeps no reference
// to a payload after OnFrame returns).
var inflateBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledInflateBuf bounds the buffers kept for reuse.
const maxPooledInflateBuf = 64 << 10

// deliverInflated inflates a whole compressed message and hands it to h: 1009 as soon as
// the inflated size passes limit, 1007 for data that does not inflate or text that is
// not UTF-8.
func deliverInflated(op byte, msg []byte, limit int, h frameHandler) int {
	bp := inflateBufs.Get().(*[]byte)
	out, err := inflate((*bp)[:0], msg, limit)
	code := 0
	switch {
	case errors.Is(err, errInflatedTooBig):
		code = CloseTooBig
	case err != nil:
		code = CloseInvalidPayload
	case op == OpText && !utf8.Valid(out):
		code = CloseInvalidPayload
	}
	ok := code != 0 || h.onFrame(op, out)
	if cap(out) <= maxPooledInflateBuf {
		*bp = out[:0]
		inflateBufs.Put(bp)
	}
	switch {
	case code != 0:
		return code
	case !ok:
		return feedStop
	}
	return 0
}

// readFramesSize is the read buffer of a connection read by readFrames.
const readFramesSize = 2 << 10

// readFrames is readLoop for a connection that negotiated permessage-deflate but is not
// polled (TLS, or no epoll): it reads the socket itself and parses with the poller's frame
// reader, which applies RFC 7692's rules and the inflated-size bound that gorilla's
// reader lacks (gorilla's read limit counts compressed bytes only).
func (c *Conn) readFrames() {
	defer c.cleanup()
	c.ws = nil // only the handshake needed gorilla
	buf := make([]byte, readFramesSize)
	for {
		n, err := c.netConn.Read(buf)
		if n > 0 {
			switch res := c.rd.feed(buf[:n], int(c.limit), (*frames)(c)); res {
			case 0:
			case feedStop:
				return // the peer's close: closeWith already queued the reply
			default:
				c.protocolError(res)
				return
			}
		}
		if err != nil {
			return
		}
	}
}
