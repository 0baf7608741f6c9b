//go:build linux

package ws

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// seqHandler names every connection in its greeting ("id:N"), and every frame the test
// sends a connection (seqFrame) carries that id and the connection's own sequence number:
// a client knows a frame meant for another connection (a write to a reused descriptor),
// a gap, a repeat and a corruption. Text messages are echoed with "echo:" before them.
type seqHandler struct {
	mu   sync.Mutex
	next int
	open map[int]*seqSession
	all  map[int]*seqSession
}

func newSeqHandler() *seqHandler {
	return &seqHandler{open: map[int]*seqSession{}, all: map[int]*seqSession{}}
}

type seqSession struct {
	h     *seqHandler
	id    int
	c     *Conn
	sent  int // seq frames WritePreframed took; only the test's writer touches it
	cause atomic.Int32
	ended atomic.Bool
	push  atomic.Bool // the writer never skips it, whatever it has buffered
}

func (h *seqHandler) Accept(_ *Request, greeting []byte) Decision {
	h.mu.Lock()
	id := h.next
	h.next++
	h.mu.Unlock()
	s := &seqSession{h: h, id: id}
	return Decision{Session: s, Greeting: AppendTextFrame(greeting, []byte("id:"+strconv.Itoa(id))), MaxMessageSize: 1 << 10}
}

func (s *seqSession) OnOpen(c *Conn) bool {
	s.c = c
	s.h.mu.Lock()
	s.h.open[s.id] = s
	s.h.all[s.id] = s
	s.h.mu.Unlock()
	return true
}

func (s *seqSession) OnFrame(op byte, p []byte) {
	if op == OpText {
		s.c.WriteText(append([]byte("echo:"), p...))
	}
}

func (s *seqSession) OnClose(cause Cause) {
	s.cause.Store(int32(cause))
	s.ended.Store(true)
	s.h.mu.Lock()
	delete(s.h.open, s.id)
	s.h.mu.Unlock()
}

// sessions are the open sessions.
func (h *seqHandler) sessions() []*seqSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*seqSession, 0, len(h.open))
	for _, s := range h.open {
		out = append(out, s)
	}
	return out
}

func (h *seqHandler) session(id int) *seqSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.all[id]
}

// total is how many sessions ever opened.
func (h *seqHandler) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.all)
}

func (h *seqHandler) openCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.open)
}

// seqServer serves a seqHandler on tr; the cleanup aborts what is still open first.
func seqServer(t *testing.T, tr transport, o Options) (*seqHandler, *tserver) {
	t.Helper()
	h := newSeqHandler()
	o.Handler = h
	s := NewServer(tr.options(t, o))
	ts := &tserver{s: s, ts: newHTTPServer(t, s, tr)}
	t.Cleanup(func() {
		for _, ss := range h.sessions() {
			ss.c.Abort()
		}
	})
	return h, ts
}

// padFunc is the padding of connection id's frame seq: sizes that vary from frame to
// frame, so batches and short writes split them anywhere.
type padFunc func(id, seq int) int

// smallPad is up to 300 bytes, and large every 41st frame (0: never).
func smallPad(large int) padFunc {
	return func(id, seq int) int {
		if large > 0 && (id+seq)%41 == 0 {
			return large
		}
		return (id*7 + seq*13) % 300
	}
}

// seqFrame is frame seq of connection id.
func seqFrame(id, seq int, pad padFunc) []byte {
	p := fmt.Appendf(nil, "%d.%d.", id, seq)
	p = append(p, bytes.Repeat([]byte{byte('a' + seq%26)}, pad(id, seq))...)
	return TextFrame(p)
}

// checkSeq checks that p is frame seq of connection id.
func checkSeq(p []byte, id, seq int, pad padFunc) error {
	head := fmt.Appendf(nil, "%d.%d.", id, seq)
	n := pad(id, seq)
	ok := len(p) == len(head)+n && bytes.HasPrefix(p, head)
	for i := len(head); ok && i < len(p); i++ {
		ok = p[i] == byte('a'+seq%26)
	}
	if ok {
		return nil
	}
	if len(p) > 40 {
		p = p[:40]
	}
	return fmt.Errorf("frame %d of connection %d: got %q... (%d bytes)", seq, id, p, len(p))
}

// seqClient is a strict client reading a seqHandler's frames on its own goroutine.
type seqClient struct {
	id   int
	nc   net.Conn
	pad  padFunc
	gate chan struct{} // if set, reading starts once it is closed
	quit atomic.Bool
	done chan struct{}
	wmu  sync.Mutex // serializes writes to nc

	mu     sync.Mutex
	got    int      // seq frames read, in order
	pongs  []string // pong payloads, in order
	echoes []string // echoed texts, in order
	code   int      // the close frame's code (1005: none given; 0: no close frame)
	bad    error    // the first violation
	end    error    // how reading ended
}

// dialSeq opens a client on ts and reads its greeting.
func dialSeq(t *testing.T, ts *tserver, pad padFunc) *seqClient {
	t.Helper()
	return dialSeqGated(t, ts, pad, nil)
}

// dialSeqGated is dialSeq whose reader reads nothing until gate is closed.
func dialSeqGated(t *testing.T, ts *tserver, pad padFunc, gate chan struct{}) *seqClient {
	t.Helper()
	w, resp := dialWire(t, ts, "x", "")
	if w == nil {
		t.Fatalf("handshake: %s", resp.Status)
	}
	f := w.next(t)
	id, err := strconv.Atoi(string(bytes.TrimPrefix(f.payload, []byte("id:"))))
	if f.op != OpText || err != nil {
		t.Fatalf("greeting %q", f.payload)
	}
	_ = w.nc.SetDeadline(time.Time{})
	c := &seqClient{id: id, nc: w.nc, pad: pad, gate: gate, done: make(chan struct{})}
	go c.read(w.br)
	return c
}

func (c *seqClient) read(br *bufio.Reader) {
	defer close(c.done)
	if c.gate != nil {
		<-c.gate
	}
	for {
		f, err := readServerFrame(br)
		c.mu.Lock()
		if err != nil {
			c.end = err
			if !c.quit.Load() && !endOfConn(err) {
				c.failLocked(fmt.Errorf("read: %w", err))
			}
			c.mu.Unlock()
			return
		}
		if c.code != 0 {
			c.failLocked(fmt.Errorf("frame op %d after the close frame", f.op))
		}
		switch f.op {
		case OpText:
			if e, ok := bytes.CutPrefix(f.payload, []byte("echo:")); ok {
				c.echoes = append(c.echoes, string(e))
				break
			}
			if err := checkSeq(f.payload, c.id, c.got, c.pad); err != nil {
				c.failLocked(err)
			}
			c.got++
		case OpPong:
			c.pongs = append(c.pongs, string(f.payload))
		case OpClose:
			c.code = 1005
			if len(f.payload) >= 2 {
				c.code = int(binary.BigEndian.Uint16(f.payload))
			}
			// Answer as a client does (the server then ends at once, not after its grace)
			// and go on reading: nothing may follow the close frame but the end.
			c.mu.Unlock()
			c.send([]byte{0x88, 0x82, 0, 0, 0, 0, 0x03, 0xe8})
			c.mu.Lock()
		default:
			c.failLocked(fmt.Errorf("unexpected op %d", f.op))
		}
		c.mu.Unlock()
	}
}

func (c *seqClient) failLocked(err error) {
	if c.bad == nil {
		c.bad = err
	}
}

// endOfConn is how a connection the server closed or dropped ends for its reader: a frame
// cut short by the drop is the end too, never a frame of the stream.
func endOfConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// state is what the client has seen so far.
func (c *seqClient) state() (got, code int, bad error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got, c.code, c.bad
}

func (c *seqClient) ended() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// send writes b (masked frames) to the server; an error is the reader's to see.
func (c *seqClient) send(b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, _ = c.nc.Write(b)
}

// close ends the client from its side.
func (c *seqClient) close() {
	c.quit.Store(true)
	_ = c.nc.Close()
}

// waitGot polls until the client has read n seq frames (or a violation or its end).
func (c *seqClient) waitGot(t *testing.T, n int) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("client %d to read %d frames", c.id, n), func() bool {
		got, _, bad := c.state()
		return got >= n || bad != nil || c.ended()
	})
}

// seqWriter sends every open session its next frame, pass after pass, until stopped;
// a session with more than maxBuffered bytes waiting is skipped for the pass (no gap:
// its sequence goes on where it stopped), unless it is marked push.
type seqWriter struct {
	passes atomic.Int64
	stop   chan struct{}
	done   chan struct{}
}

func startSeqWriter(h *seqHandler, pad padFunc, maxBuffered int) *seqWriter {
	w := &seqWriter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			for _, s := range h.sessions() {
				if !s.push.Load() && s.c.Buffered() > maxBuffered {
					continue
				}
				if s.c.WritePreframed(seqFrame(s.id, s.sent, pad)) {
					s.sent++
				}
			}
			w.passes.Add(1)
			time.Sleep(100 * time.Microsecond) // paces the writer: rounds, not a spin
		}
	}()
	return w
}

// waitPasses polls until the writer made n passes.
func (w *seqWriter) waitPasses(t *testing.T, n int64) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("%d writer passes", n), func() bool { return w.passes.Load() >= n })
}

func (w *seqWriter) halt() {
	close(w.stop)
	<-w.done
}
