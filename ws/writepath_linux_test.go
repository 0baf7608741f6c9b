//go:build linux

package ws

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// logLine is one JSON log record's level and message.
type logLine struct {
	Level string `json:"level"`
	Msg   string `json:"msg"`
}

// writePathLines are the records whose message starts with "write path:".
func writePathLines(t *testing.T, out string) []logLine {
	t.Helper()
	var lines []logLine
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r logLine
		if l == "" || json.Unmarshal([]byte(l), &r) != nil {
			continue
		}
		if strings.HasPrefix(r.Msg, "write path:") {
			lines = append(lines, r)
		}
	}
	return lines
}

// refuseSQEs makes every SENDMSG placed on a ring, from the start-up probe's on, one the
// kernel completes with -EINVAL while refuse is set (until the test ends).
func refuseSQEs(t *testing.T) *atomic.Bool {
	var refuse atomic.Bool
	TestHookURingRefuseSQE = refuse.Load
	t.Cleanup(func() { TestHookURingRefuseSQE = nil })
	return &refuse
}

// The write path is chosen once at start-up and named in one log line: io_uring only when
// the probe's SENDMSG completed (io_uring_setup succeeding is not enough: a kernel before
// 5.3 or a sandbox completes every SENDMSG with -EINVAL, here made real by an opcode the
// kernel does not know), writev with the reason otherwise (at Warn when server.io_uring is
// true, Info when it is only the default), and writev without a probe when it is false.
func TestWritePathChosenAtStart(t *testing.T) {
	tests := []struct {
		name    string
		mode    IOUringMode
		kernel  bool   // needs a kernel that allows io_uring
		refuse  string // "setup": io_uring_setup fails EPERM; "sendmsg": the probe's SENDMSG completes -EINVAL
		want    logLine
		path    string
		tryRing bool // a ring is set up
	}{
		{"absent, io_uring works", IOUringAuto, true, "", logLine{"INFO", "write path: io_uring"}, PathIOUring, true},
		{"true, io_uring works", IOUringOn, true, "", logLine{"INFO", "write path: io_uring"}, PathIOUring, true},
		{"absent, setup refused", IOUringAuto, false, "setup", logLine{"INFO", "write path: writev (io_uring refused: operation not permitted)"}, PathWritev, true},
		{"true, setup refused", IOUringOn, false, "setup", logLine{"WARN", "write path: writev (io_uring refused: operation not permitted)"}, PathWritev, true},
		{"absent, SENDMSG refused", IOUringAuto, true, "sendmsg", logLine{"INFO", "write path: writev (io_uring refused: SENDMSG completed with invalid argument)"}, PathWritev, true},
		{"true, SENDMSG refused", IOUringOn, true, "sendmsg", logLine{"WARN", "write path: writev (io_uring refused: SENDMSG completed with invalid argument)"}, PathWritev, true},
		{"false", IOUringOff, false, "", logLine{"INFO", "write path: writev (server.io_uring: false)"}, PathWritev, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.kernel {
				requireURing(t)
			}
			tried := 0
			setupRing = func(n uint32) (*ring, error) {
				tried++
				if tt.refuse == "setup" {
					return nil, fmt.Errorf("io_uring_setup: %w", unix.EPERM)
				}
				return newRing(n)
			}
			t.Cleanup(func() { setupRing = newRing })
			refuseSQEs(t).Store(tt.refuse == "sendmsg")
			var logs testutil.SyncBuffer
			h := newEchoHandler()
			s := NewServer(Options{Handler: h, IOUring: tt.mode, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			ts := &tserver{h: h, s: s, ts: newHTTPServer(t, s, fastTransport)}
			w, _ := dialWire(t, ts, "echo", "")
			if got := w.awaitEcho(t, 1<<20); len(got) != 0 {
				t.Fatalf("unexpected frames %q", got)
			}
			lines := writePathLines(t, logs.String())
			if len(lines) != 1 || lines[0] != tt.want {
				t.Fatalf("write path lines %+v, want exactly %+v", lines, tt.want)
			}
			if got := s.WritePath(); got != tt.path {
				t.Fatalf("WritePath %q, want %q", got, tt.path)
			}
			if (tried > 0) != tt.tryRing {
				t.Fatalf("io_uring_setup called %d times", tried)
			}
			rings := 0
			for _, f := range s.flushers {
				if f.ur != nil {
					rings++
				}
			}
			// The echo's write is counted once its completion is reaped, maybe after the
			// client read it.
			testutil.WaitFor(t, "the echo's write counted", func() bool {
				wc := s.WriteCounts()
				return wc.URing+wc.Writev > 0
			})
			wc := s.WriteCounts()
			if tt.path == PathIOUring {
				if rings != len(s.flushers) || wc.URing == 0 || wc.Writev != 0 {
					t.Fatalf("%d of %d flushers with a ring, counts %+v: want io_uring only", rings, len(s.flushers), wc)
				}
				return
			}
			if rings != 0 || wc.URing != 0 || wc.Writev == 0 {
				t.Fatalf("%d flushers with a ring, counts %+v: want writev only", rings, wc)
			}
		})
	}
}

// A completion that says the ring cannot do SENDMSG at all (-EINVAL, from a kernel that
// does not know the opcode) at run time: no connection is closed, the frames whose
// completion failed are written with writev, every frame reaches every client in order,
// and the write path is writev for every socket from then on, with one Warn.
func TestURingRefusedAtRunTime(t *testing.T) {
	const clients, before, after = 12, 3, 20
	refuse := refuseSQEs(t)
	var logs testutil.SyncBuffer
	h := newEchoHandler()
	s := NewServer(fastURingTransport.options(t, Options{Handler: h, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}))
	ts := &tserver{h: h, s: s, ts: newHTTPServer(t, s, fastURingTransport)}
	ws := make([]*wireConn, clients)
	for i := range ws {
		ws[i], _ = dialWire(t, ts, "echo", "")
	}
	testutil.WaitFor(t, "the clients to open", func() bool { return len(h.conns()) == clients })
	if s.WritePath() != PathIOUring {
		t.Fatalf("write path %s at start", s.WritePath())
	}
	conns := h.conns()
	send := func(from, to int) {
		for k := from; k < to; k++ {
			for i, c := range conns {
				if !c.WritePreframed(TextFrame(fmt.Appendf(nil, "%p.%d", c, k))) {
					t.Fatalf("conn %d: frame %d refused", i, k)
				}
			}
		}
	}
	expect := func(from, to int) {
		for _, w := range ws {
			var c *Conn
			for k := from; k < to; k++ {
				f := w.next(t)
				if c == nil { // which conn this client is: the first frame names it
					for _, cc := range conns {
						if strings.HasPrefix(string(f.payload), fmt.Sprintf("%p.", cc)) {
							c = cc
						}
					}
				}
				if want := fmt.Sprintf("%p.%d", c, k); f.op != OpText || string(f.payload) != want {
					t.Fatalf("got %q (op %d), want %q", f.payload, f.op, want)
				}
			}
		}
	}
	send(0, before)
	expect(0, before)
	uringBefore := s.WriteCounts().URing

	refuse.Store(true)
	send(before, after)
	expect(before, after)

	select {
	case cause := <-h.closed:
		t.Fatalf("a connection closed (cause %d)", cause)
	default:
	}
	if n := len(h.conns()); n != clients {
		t.Fatalf("%d connections open, want %d", n, clients)
	}
	for i, w := range ws { // each still answers
		if got := w.awaitEcho(t, 1<<20); len(got) != 0 {
			t.Fatalf("client %d: unexpected frames %q", i, got)
		}
	}
	if got := s.WritePath(); got != PathWritev {
		t.Fatalf("write path %s after a refused completion, want writev", got)
	}
	want := []logLine{{"INFO", "write path: io_uring"}, {"WARN", "write path: writev (io_uring refused at run time: SENDMSG completed with invalid argument)"}}
	if lines := writePathLines(t, logs.String()); fmt.Sprint(lines) != fmt.Sprint(want) {
		t.Fatalf("write path lines %+v, want %+v", lines, want)
	}
	wc := s.WriteCounts()
	if wc.Writev == 0 {
		t.Fatalf("counts %+v: want the frames after the refusal written with writev", wc)
	}
	// A refused SQE is not a write: no more io_uring writes were counted than refused ones
	// would explain (none once the flushers closed their rings).
	if wc.URing-uringBefore > uint64(clients) {
		t.Fatalf("%d io_uring writes after the refusal for %d sockets", wc.URing-uringBefore, clients)
	}
}
