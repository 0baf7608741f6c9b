package cluster

import (
	"encoding/binary"

	"github.com/reverbgo/reverbgo/channels"
)

// envelopeMagic starts every envelope; a message without it (another Reverb implementation
// sharing the channel, an older or newer format) is dropped instead of being delivered as
// garbage. "rg2" added the flags byte and the sequence number; "rg3" is a recovery event's,
// whose frame the history script made: between the fields and the frame it carries the
// channel's epoch (one length byte, then the epoch), so every node knows the (epoch, serial)
// of what it delivers. A node of an older version drops rg3 rather than deliver its epoch
// as part of the frame.
const (
	envelopeMagic   = "rg2"
	envelopeMagicV3 = "rg3"
)

// Envelope flags. flagSerialled marks a recovery channel's event whose frame the history
// script made (it carries the serial): the publishing node delivers it from its own
// subscription too, as it had no frame to deliver at publish time. flagEcho marks an event
// the publishing node also delivers from its subscription (an HTTP API publish that waited
// for Redis): every node then delivers it in Redis's order.
const (
	flagCacheable = 1
	flagSerialled = 2
	flagEcho      = 4
)

// envelope is one message between nodes.
type envelope struct {
	node  string
	seq   uint64
	echo  bool   // the publishing node delivers it from its subscription (flagEcho, serialled)
	epoch string // a serialled event's epoch
	m     channels.Message
}

// cost is what a queued message counts against the backlog bound.
func cost(m channels.Message) int64 {
	return int64(len(m.Frame)+len(m.AppID)+len(m.Channel)+len(m.Except)) + 64
}

// encodeEnvelope lays out magic, a flags byte, the node's sequence number as a uvarint, then
// node, app, channel and except as uvarint-length strings, then (rg3) the epoch's length
// byte and the epoch, then the frame as the rest: binary-safe and decoded without a parser.
func encodeEnvelope(e envelope) []byte {
	buf := envelopePrefix(e, len(e.epoch)+1+len(e.m.Frame))
	if e.m.Recovery != nil {
		buf = append(buf, byte(len(e.epoch)))
		buf = append(buf, e.epoch...)
	}
	return append(buf, e.m.Frame...)
}

// envelopePrefix is the envelope up to its tail: what the history script completes with the
// epoch and the frame it makes (e.m.Frame and e.epoch are not used).
func envelopePrefix(e envelope, room int) []byte {
	m := e.m
	buf := make([]byte, 0, len(envelopeMagic)+1+binary.MaxVarintLen64+4*binary.MaxVarintLen16+len(e.node)+len(m.AppID)+len(m.Channel)+len(m.Except)+room)
	var flags byte
	if m.Cacheable {
		flags |= flagCacheable
	}
	if m.Recovery != nil {
		flags |= flagSerialled
		buf = append(buf, envelopeMagicV3...)
	} else {
		buf = append(buf, envelopeMagic...)
	}
	if e.echo {
		flags |= flagEcho
	}
	buf = append(buf, flags)
	buf = binary.AppendUvarint(buf, e.seq)
	for _, s := range [...]string{e.node, m.AppID, m.Channel, m.Except} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	return buf
}

// serialled is what a received message's Recovery points at: its frame already carries
// its serial (receivers only read that it is set).
var serialled channels.HistoryLimits

func decodeEnvelope(p []byte) (e envelope, ok bool) {
	if len(p) < len(envelopeMagic)+1 {
		return e, false
	}
	v3 := string(p[:len(envelopeMagicV3)]) == envelopeMagicV3
	if !v3 && string(p[:len(envelopeMagic)]) != envelopeMagic {
		return e, false
	}
	flags := p[len(envelopeMagic)]
	if v3 != (flags&flagSerialled != 0) {
		return e, false
	}
	p = p[len(envelopeMagic)+1:]
	seq, w := binary.Uvarint(p)
	if w <= 0 {
		return e, false
	}
	p = p[w:]
	var fields [4]string
	for i := range fields {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return e, false
		}
		fields[i] = string(p[w : w+int(n)])
		p = p[w+int(n):]
	}
	e = envelope{node: fields[0], seq: seq, echo: flags&(flagEcho|flagSerialled) != 0}
	if v3 {
		if len(p) < 1 || int(p[0]) > len(p)-1 {
			return envelope{}, false
		}
		e.epoch = string(p[1 : 1+int(p[0])])
		p = p[1+int(p[0]):]
	}
	e.m = channels.Message{AppID: fields[1], Channel: fields[2], Except: fields[3], Frame: p, Cacheable: flags&flagCacheable != 0}
	if v3 {
		e.m.Recovery = &serialled
	}
	return e, true
}
