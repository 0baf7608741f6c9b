package ws

import (
	"encoding/binary"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// Compression configures permessage-deflate (RFC 7692) for a Server. Both directions run
// without context takeover: every message is compressed and inflated on its own, so a
// connection keeps no deflate state between messages (no window per socket).
type Compression struct {
	Enabled bool
	// MinBytes is the smallest payload sent compressed; smaller ones go out plain.
	MinBytes int
	// Level is the deflate level, 1 (fastest) to 9 (smallest); 0 means 1.
	Level int
}

// ExtensionResponse is the Sec-WebSocket-Extensions value the server answers an accepted
// permessage-deflate offer with: no context takeover in either direction.
const ExtensionResponse = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"

// extensionLine is the response header line the fast path adds to its 101.
const extensionLine = "Sec-WebSocket-Extensions: " + ExtensionResponse + "\r\n"

// deflateTail is what RFC 7692 §7.2.1 strips from every compressed message (the end of a
// sync flush) and §7.2.2 appends again before inflating.
const deflateTail = "\x00\x00\xff\xff"

// inflateTail is deflateTail followed by an empty final stored block, so the inflater
// ends cleanly at the end of the message instead of reporting an unexpected EOF.
const inflateTail = deflateTail + "\x01\x00\x00\xff\xff"

// Deflater compresses server frames for the connections that negotiated permessage-deflate.
// One serves the whole server: it holds no per-connection state, only pooled compressors.
type Deflater struct {
	level    int
	minBytes int
	writers  sync.Pool // *flate.Writer at level
}

// NewDeflater returns the compressor for opts, nil when compression is off.
func NewDeflater(opts Compression) *Deflater {
	if !opts.Enabled {
		return nil
	}
	level := opts.Level
	if level < flate.BestSpeed || level > flate.BestCompression {
		level = flate.BestSpeed
	}
	return &Deflater{level: level, minBytes: max(opts.MinBytes, 0)}
}

// MinBytes is the smallest payload this Deflater compresses.
func (d *Deflater) MinBytes() int { return d.minBytes }

// sliceWriter is an io.Writer appending to a byte slice.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// deflateJob is a pooled compressor with the buffer it writes into.
type deflateJob struct {
	fw  *flate.Writer
	out sliceWriter
}

// Frame compresses frame, a complete unmasked FIN data frame without RSV bits (as
// AppendFrame builds), into a new frame of the same opcode with RSV1 set. It returns nil
// when the frame is to stay as it is: a control frame or a fragment, a payload under
// MinBytes, or one that would not shrink. The result is a buffer of its own that may be
// queued on any number of connections.
func (d *Deflater) Frame(frame []byte) []byte {
	op, payload, ok := splitDataFrame(frame)
	if !ok || len(payload) < d.minBytes || len(payload) == 0 {
		return nil
	}
	const room = 10 // the longest header, written in front of the compressed bytes
	j, _ := d.writers.Get().(*deflateJob)
	if j == nil {
		j = &deflateJob{}
		j.fw, _ = flate.NewWriter(&j.out, d.level)
	}
	j.out.b = make([]byte, room, room+len(payload)/2+64)
	j.fw.Reset(&j.out)
	_, _ = j.fw.Write(payload)
	_ = j.fw.Flush() // a sync flush: the message ends on a byte boundary with deflateTail
	buf := j.out.b
	j.out.b = nil
	d.writers.Put(j)
	if len(buf) >= room+len(deflateTail) && string(buf[len(buf)-len(deflateTail):]) == deflateTail {
		buf = buf[:len(buf)-len(deflateTail)]
	}
	n := len(buf) - room
	if n >= len(payload) {
		return nil // incompressible: the plain frame is smaller
	}
	hs := headerSize(n)
	out := buf[room-hs:]
	putHeader(out, 0x80|0x40|op, n)
	return out
}

// Compress returns frame compressed by d (Frame), or frame itself when d is nil or Frame
// keeps it plain.
func (d *Deflater) Compress(frame []byte) []byte {
	if d == nil || len(frame) < d.minBytes {
		return frame
	}
	if z := d.Frame(frame); z != nil {
		return z
	}
	return frame
}

// splitDataFrame decodes a server frame built by AppendFrame: its opcode and payload,
// ok only for a FIN text or binary frame without RSV bits or mask whose length matches.
func splitDataFrame(f []byte) (op byte, payload []byte, ok bool) {
	if len(f) < 2 || f[0]&0xF0 != 0x80 || f[1]&0x80 != 0 {
		return 0, nil, false
	}
	op = f[0] & 0x0F
	if op != OpText && op != OpBinary {
		return 0, nil, false
	}
	n, p := uint64(f[1]&0x7F), 2
	switch n {
	case 126:
		if len(f) < 4 {
			return 0, nil, false
		}
		n, p = uint64(binary.BigEndian.Uint16(f[2:])), 4
	case 127:
		if len(f) < 10 {
			return 0, nil, false
		}
		n, p = binary.BigEndian.Uint64(f[2:]), 10
	}
	if uint64(len(f)-p) != n {
		return 0, nil, false
	}
	return op, f[p:], true
}

func headerSize(n int) int {
	switch {
	case n < 126:
		return 2
	case n <= 0xFFFF:
		return 4
	}
	return 10
}

// putHeader writes the header of a frame with first byte b0 and payload length n at the
// start of dst (headerSize(n) bytes).
func putHeader(dst []byte, b0 byte, n int) {
	dst[0] = b0
	switch {
	case n < 126:
		dst[1] = byte(n)
	case n <= 0xFFFF:
		dst[1] = 126
		binary.BigEndian.PutUint16(dst[2:], uint16(n))
	default:
		dst[1] = 127
		binary.BigEndian.PutUint64(dst[2:], uint64(n))
	}
}

// errInflatedTooBig is inflate's answer once the output passes the limit.
var errInflatedTooBig = errors.New("ws: inflated message over the read limit")

// inflateSource is the compressed message followed by inflateTail, read without copying;
// it is an io.ByteReader so the inflater reads it directly instead of through a bufio.
type inflateSource struct {
	p    []byte
	tail int // bytes of inflateTail already read
}

func (s *inflateSource) Read(b []byte) (int, error) {
	if len(s.p) > 0 {
		n := copy(b, s.p)
		s.p = s.p[n:]
		return n, nil
	}
	if s.tail == len(inflateTail) {
		return 0, io.EOF
	}
	n := copy(b, inflateTail[s.tail:])
	s.tail += n
	return n, nil
}

func (s *inflateSource) ReadByte() (byte, error) {
	if len(s.p) > 0 {
		c := s.p[0]
		s.p = s.p[1:]
		return c, nil
	}
	if s.tail == len(inflateTail) {
		return 0, io.EOF
	}
	c := inflateTail[s.tail]
	s.tail++
	return c, nil
}

// inflater is a pooled decompressor: the only deflate state, shared by every connection
// and held only while one message is inflated.
type inflater struct {
	src inflateSource
	fr  io.ReadCloser
}

var inflaters sync.Pool // *inflater

// inflateChunk is how much the output may grow past what it holds before the limit is
// checked again: a message over the limit costs at most the limit plus this.
const inflateChunk = 4 << 10

// inflate appends the inflated message p (a compressed message without its tail) to dst.
// It stops with errInflatedTooBig as soon as the output passes limit (<= 0: no limit), so
// a small message that inflates to gigabytes costs no more than limit bytes of output.
func inflate(dst, p []byte, limit int) ([]byte, error) {
	in, _ := inflaters.Get().(*inflater)
	if in == nil {
		in = &inflater{}
		in.src = inflateSource{p: p}
		in.fr = flate.NewReader(&in.src)
	} else {
		in.src = inflateSource{p: p}
		_ = in.fr.(flate.Resetter).Reset(&in.src, nil)
	}
	defer func() {
		in.src = inflateSource{}
		inflaters.Put(in)
	}()
	start := len(dst)
	for {
		if len(dst) == cap(dst) {
			grow := min(max(cap(dst)-start, 512), 1<<20)
			if limit > 0 {
				grow = min(grow, limit+1-(len(dst)-start))
				grow = max(grow, 1)
			}
			dst = append(dst[:cap(dst)], make([]byte, grow)...)[:len(dst)]
		}
		room := dst[len(dst):cap(dst)]
		if limit > 0 {
			room = room[:min(len(room), limit+1-(len(dst)-start), inflateChunk)]
		}
		n, err := in.fr.Read(room)
		dst = dst[:len(dst)+n]
		if limit > 0 && len(dst)-start > limit {
			return dst, errInflatedTooBig
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}
