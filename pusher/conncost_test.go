package pusher

import (
	"bytes"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// The per-connection cost (issue 25): a connection accepted, handshaken, sent
// connection_established, subscribed to a public channel and answered, then left idle.
// Counted in allocations and bytes, never timed (the figures in docs/benchmarks.md are the
// lead's).

// connOpener opens subscribed connections to ts with a client whose own cost per
// connection is fixed (the dial and a net.Conn; one shared read buffer).
type connOpener struct {
	t        testing.TB
	addr     string
	req, sub []byte
	buf      []byte
	conns    []net.Conn
}

func newConnOpener(t testing.TB, ts *tserver, n int) *connOpener {
	addr := ts.ts.Listener.Addr().String()
	sub := []byte(`{"event":"pusher:subscribe","data":{"channel":"room"}}`)
	o := &connOpener{
		t:    t,
		addr: addr,
		req: []byte("GET /app/" + ts.app.Key + "?protocol=7&client=js&version=8.4.0 HTTP/1.1\r\nHost: " + addr +
			"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
			"Sec-WebSocket-Version: 13\r\n\r\n"),
		sub:   append([]byte{0x81, 0x80 | byte(len(sub)), 0, 0, 0, 0}, sub...), // masked, zero key
		buf:   make([]byte, 8<<10),
		conns: make([]net.Conn, 0, n),
	}
	t.Cleanup(func() {
		for _, c := range o.conns {
			_ = c.Close()
		}
	})
	return o
}

// until reads from c until what it read holds want.
func (o *connOpener) until(c net.Conn, want []byte) {
	got := 0
	for !bytes.Contains(o.buf[:got], want) {
		_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
		m, err := c.Read(o.buf[got:])
		if err != nil {
			o.t.Fatalf("waiting for %s: %v (%q)", want, err, o.buf[:got])
		}
		got += m
	}
}

// open opens one connection and subscribes it; it stays open until the test ends.
func (o *connOpener) open() {
	c, err := net.Dial("tcp", o.addr)
	if err != nil {
		o.t.Fatal(err)
	}
	o.conns = append(o.conns, c)
	if _, err := c.Write(o.req); err != nil {
		o.t.Fatal(err)
	}
	o.until(c, []byte("connection_established"))
	if _, err := c.Write(o.sub); err != nil {
		o.t.Fatal(err)
	}
	o.until(c, []byte("subscription_succeeded"))
}

// TestConnectSubscribeAllocs guards the connect+subscribe path on both accept paths:
// allocations per connection (the whole process, the client's dial included: 16 of them) at
// most the count measured when the guard was written. Skipped under -race; scripts/test.sh
// runs it without.
func TestConnectSubscribeAllocs(t *testing.T) {
	testutil.SkipUnderRace(t)
	for _, tc := range []struct {
		name  string
		opt   serverOpt
		bound float64 // measured when the guard was written
		linux bool    // the fast path only exists on Linux
	}{
		{"fast path", withFastListener(), 29, true}, // 3b138ab: 40; 4ce5356: 43
		{"portable path", withStdListener(), 93, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.linux && runtime.GOOS != "linux" {
				t.Skip("no fast path here")
			}
			const runs = 300
			o := newConnOpener(t, newServer(t, tc.opt), runs+60)
			for range 50 { // warm up: pools, pollers, flushers, tables
				o.open()
			}
			n := testing.AllocsPerRun(runs, o.open)
			t.Logf("allocations per connection (accept, handshake, subscribe, answer): %v", n)
			if n > tc.bound {
				t.Fatalf("allocations per connection: %v, want at most %v", n, tc.bound)
			}
		})
	}
}

// TestConnCostMeasure (CONNCOST_N=2000) opens N connections and reports allocations and
// bytes allocated per connection (whole process, this client included) and retained
// (HeapInuse+StackInuse)/N after GC; CONNCOST_PROF=file also writes the allocation profile
// of those N connections (go tool pprof -sample_index=alloc_objects|inuse_space).
func TestConnCostMeasure(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CONNCOST_N"))
	if n == 0 {
		t.Skip("CONNCOST_N unset")
	}
	o := newConnOpener(t, newServer(t), n+50)
	for range 50 {
		o.open()
	}
	settle := func() (ms runtime.MemStats) {
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms
	}
	if os.Getenv("CONNCOST_PROF") != "" {
		runtime.MemProfileRate = 1
	}
	before := settle()
	g0 := runtime.NumGoroutine()
	for range n {
		o.open()
	}
	after := settle()
	g1 := runtime.NumGoroutine()
	if p := os.Getenv("CONNCOST_PROF"); p != "" {
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		_ = pprof.Lookup("allocs").WriteTo(f, 0)
		_ = f.Close()
	}
	f := float64(n)
	t.Logf("N=%d allocs/conn %.1f  bytes/conn %.0f  retained (HeapInuse+StackInuse)/conn %.0f B  heap objects/conn %.1f  goroutines/conn %.2f",
		n, float64(after.Mallocs-before.Mallocs)/f, float64(after.TotalAlloc-before.TotalAlloc)/f,
		(float64(after.HeapInuse+after.StackInuse)-float64(before.HeapInuse+before.StackInuse))/f,
		(float64(after.HeapObjects)-float64(before.HeapObjects))/f, float64(g1-g0)/f)
}
