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
//
// flagMember marks a presence member event (Message.Member). Its kind and user id ride in
// the except field, ahead of the except socket id: a kind byte (1 added, 2 removed), the
// user id's uvarint length, the user id, then the socket id. A node of an older version
// ignores the flag and reads the field as the except socket id; the control byte in front
// matches no socket, and the socket it names is the publishing node's own, never one of
// the reader's, so it delivers the event to every local subscriber exactly as before and
// keeps reading the user id from the frame. The version tag stays rg2 (rg3) for the same
// reason: an older node would drop a new tag, and its clients would miss member events.
const (
	flagCacheable = 1
	flagSerialled = 2
	flagEcho      = 4
	flagMember    = 8
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
	return int64(len(m.Frame)+len(m.AppID)+len(m.Channel)+len(m.Except)+len(m.Member.UserID)) + 64
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
	member := m.Member.Kind != channels.NotMember
	extra := 0
	if member {
		extra = 1 + binary.MaxVarintLen64 + len(m.Member.UserID)
	}
	buf := make([]byte, 0, len(envelopeMagic)+1+binary.MaxVarintLen64+4*binary.MaxVarintLen16+len(e.node)+len(m.AppID)+len(m.Channel)+len(m.Except)+extra+room)
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
	if member {
		flags |= flagMember
	}
	buf = append(buf, flags)
	buf = binary.AppendUvarint(buf, e.seq)
	for _, s := range [...]string{e.node, m.AppID, m.Channel} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	if !member {
		buf = binary.AppendUvarint(buf, uint64(len(m.Except)))
		return append(buf, m.Except...)
	}
	id := m.Member.UserID
	var idLen [binary.MaxVarintLen64]byte
	w := binary.PutUvarint(idLen[:], uint64(len(id)))
	buf = binary.AppendUvarint(buf, uint64(1+w+len(id)+len(m.Except)))
	buf = append(buf, byte(m.Member.Kind))
	buf = append(buf, idLen[:w]...)
	buf = append(buf, id...)
	return append(buf, m.Except...)
}

// splitMember reads the except field of a flagMember envelope: the member event, then the
// except socket id.
func splitMember(f string) (ev channels.MemberEvent, except string, ok bool) {
	if len(f) < 1 {
		return ev, "", false
	}
	kind := channels.MemberKind(f[0])
	if kind != channels.MemberAdded && kind != channels.MemberRemoved {
		return ev, "", false
	}
	n, w := binary.Uvarint([]byte(f[1:min(len(f), 1+binary.MaxVarintLen64)]))
	if w <= 0 || n > uint64(len(f)-1-w) {
		return ev, "", false
	}
	id := f[1+w : 1+w+int(n)]
	return channels.MemberEvent{Kind: kind, UserID: id}, f[1+w+int(n):], true
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
	if flags&flagMember != 0 {
		var ok bool
		if e.m.Member, e.m.Except, ok = splitMember(fields[3]); !ok {
			return envelope{}, false
		}
	}
	if v3 {
		e.m.Recovery = &serialled
	}
	return e, true
}
