package channels

import "encoding/binary"

// envelopeMagic starts every envelope; a message without it (another Reverb implementation
// sharing the channel, an older or newer format) is dropped instead of being delivered as
// garbage. "rg2" added the flags byte and the sequence number.
const envelopeMagic = "rg2"

// Envelope flags. flagSerialled marks a recovery channel's event whose frame the history
// script made (it carries the serial): the publishing node delivers it from its own
// subscription too, as it had no frame to deliver at publish time.
const (
	flagCacheable = 1
	flagSerialled = 2
)

// cost is what a queued message counts against the backlog bound.
func cost(m Message) int64 {
	return int64(len(m.Frame)+len(m.AppID)+len(m.Channel)+len(m.Except)) + 64
}

// encodeEnvelope lays out magic, a flags byte, the node's sequence number as a uvarint, then
// node, app, channel and except as uvarint-length strings, then the frame as the rest:
// binary-safe and decoded without a parser.
func encodeEnvelope(node string, seq uint64, m Message) []byte {
	buf := make([]byte, 0, len(envelopeMagic)+1+binary.MaxVarintLen64+4*binary.MaxVarintLen16+len(node)+len(m.AppID)+len(m.Channel)+len(m.Except)+len(m.Frame))
	buf = append(buf, envelopeMagic...)
	var flags byte
	if m.Cacheable {
		flags |= flagCacheable
	}
	if m.Recovery != nil {
		flags |= flagSerialled
	}
	buf = append(buf, flags)
	buf = binary.AppendUvarint(buf, seq)
	for _, s := range [...]string{node, m.AppID, m.Channel, m.Except} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	return append(buf, m.Frame...)
}

// serialled is what a received message's Recovery points at: its frame already carries
// its serial (receivers only read that it is set).
var serialled HistoryLimits

func decodeEnvelope(p []byte) (node string, seq uint64, m Message, ok bool) {
	if len(p) < len(envelopeMagic)+1 || string(p[:len(envelopeMagic)]) != envelopeMagic {
		return "", 0, m, false
	}
	flags := p[len(envelopeMagic)]
	p = p[len(envelopeMagic)+1:]
	seq, w := binary.Uvarint(p)
	if w <= 0 {
		return "", 0, m, false
	}
	p = p[w:]
	var fields [4]string
	for i := range fields {
		n, w := binary.Uvarint(p)
		if w <= 0 || n > uint64(len(p)-w) {
			return "", 0, m, false
		}
		fields[i] = string(p[w : w+int(n)])
		p = p[w+int(n):]
	}
	m = Message{AppID: fields[1], Channel: fields[2], Except: fields[3], Frame: p, Cacheable: flags&flagCacheable != 0}
	if flags&flagSerialled != 0 {
		m.Recovery = &serialled
	}
	return fields[0], seq, m, true
}
