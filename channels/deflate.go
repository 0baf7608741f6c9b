package channels

import "github.com/reverbgo/reverbgo/ws"

// Deflating is a Subscriber whose socket may have negotiated permessage-deflate. A
// broadcast to a channel with such subscribers is compressed once (ws.Deflater.Frame),
// and the same compressed frame is queued on each of them with SendFrame; the others get
// the plain frame through Send, as always.
type Deflating interface {
	Subscriber
	// Deflater is the socket's compressor, nil when it did not negotiate compression; it
	// never changes once the socket can be subscribed.
	Deflater() *ws.Deflater
	// SendFrame queues frame as it is (compressed already, or chosen to stay plain).
	SendFrame(frame []byte)
}

// deflaterOf is sub's compressor, nil for none.
func deflaterOf(sub Subscriber) *ws.Deflater {
	if d, ok := sub.(Deflating); ok {
		return d.Deflater()
	}
	return nil
}

// deliverDeflating is DeliverLocal's loop for a channel with compressing subscribers
// (ch.mu held): the frame is compressed on first need, once per Deflater (one per
// server), and nothing is compressed when every such subscriber is m.Except.
func (ch *channel) deliverDeflating(m Message) int {
	var comp []byte
	var by *ws.Deflater
	n := 0
	for id, sub := range ch.subs {
		if m.Except != "" && excluded(id, sub, m.Except) {
			continue
		}
		n++
		ds, ok := sub.(Deflating)
		var d *ws.Deflater
		if ok {
			d = ds.Deflater()
		}
		if d == nil {
			sub.Send(m.Frame)
			continue
		}
		if d != by {
			comp, by = d.Frame(m.Frame), d
		}
		if comp != nil {
			ds.SendFrame(comp)
		} else {
			ds.SendFrame(m.Frame) // under min_bytes, or incompressible
		}
	}
	return n
}
