package channels

// Compressor compresses a broadcast's frame for the sockets that share it (permessage-deflate;
// the transport implements it). Frame returns the compressed frame, or nil when the frame
// stays plain (under the compressor's minimum size, or incompressible).
type Compressor interface {
	Frame(frame []byte) []byte
}

// Deflating is a Subscriber whose socket may have negotiated permessage-deflate. A
// broadcast to a channel with such subscribers is compressed once (Compressor.Frame),
// and the same compressed frame is queued on each of them with SendFrame; the others get
// the plain frame through Send, as always.
type Deflating interface {
	Subscriber
	// Deflater is the socket's compressor, nil when it did not negotiate compression; it
	// never changes once the socket can be subscribed.
	Deflater() Compressor
	// SendFrame queues frame as it is (compressed already, or chosen to stay plain).
	SendFrame(frame []byte)
}

// deflaterOf is sub's compressor, nil for none.
func deflaterOf(sub Subscriber) Compressor {
	if d, ok := sub.(Deflating); ok {
		return d.Deflater()
	}
	return nil
}

// deliverDeflating is DeliverLocal's loop for a channel with compressing subscribers
// (ch.mu held): the frame is compressed on first need, once per Compressor (one per
// server), and nothing is compressed when every such subscriber is m.Except.
func (ch *channel) deliverDeflating(m Message) int {
	var comp []byte
	var by Compressor
	n := 0
	for id, sub := range ch.subs {
		if m.Except != "" && excluded(id, sub, m.Except) {
			continue
		}
		n++
		ds, ok := sub.(Deflating)
		var d Compressor
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
