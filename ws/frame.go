// Package ws is the WebSocket transport (RFC 6455) under the Pusher protocol: the
// listener and its epoll pollers, the upgrade, the frame reader and writer, the byte-bounded
// write queue drained by writev flushers, and the portable fallback (gorilla, TLS). It knows
// nothing of Pusher: it hands whole messages up to a Session and takes pre-framed bytes
// down, so a broadcast is framed once and the same bytes go to every subscriber.
package ws

import (
	"encoding/binary"

	"github.com/reverbgo/reverbgo/internal/wsframe"
)

// WebSocket opcodes (RFC 6455 §5.2).
const (
	OpContinuation = 0x0
	OpText         = wsframe.OpText
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA
)

// AppendFrame appends a FIN frame with the given opcode and payload to dst: a complete,
// unmasked server-to-client frame.
func AppendFrame(dst []byte, opcode byte, payload []byte) []byte {
	return wsframe.AppendFrame(dst, opcode, payload)
}

// AppendTextFrame appends payload framed as one text message to dst.
func AppendTextFrame(dst, payload []byte) []byte { return AppendFrame(dst, OpText, payload) }

// TextFrame frames payload as one text message in a buffer of its own.
func TextFrame(payload []byte) []byte {
	return AppendFrame(make([]byte, 0, len(payload)+10), OpText, payload)
}

// TextHeaderRoom is the room to leave in front of a payload for TextFrameInPlace: the
// largest server frame header.
const TextHeaderRoom = wsframe.TextHeaderRoom

// TextFrameInPlace frames as one text message the payload written at buf[TextHeaderRoom:],
// writing the header into the room before it: the frame shares buf, with no second buffer
// and no copy (one allocation per encoded event instead of two).
func TextFrameInPlace(buf []byte) []byte { return wsframe.TextFrameInPlace(buf) }

// CloseFrame builds a close frame carrying code and a reason (truncated to fit 125 bytes).
func CloseFrame(code int, reason string) []byte {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	p := make([]byte, 2, 2+len(reason))
	binary.BigEndian.PutUint16(p, uint16(code))
	p = append(p, reason...)
	return AppendFrame(nil, OpClose, p)
}
