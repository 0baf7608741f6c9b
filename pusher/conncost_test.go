package pusher

import (
	"bytes"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"
)

// TestConnCostMeasure (CONNCOST_N=2000) opens N real connections to an in-process server,
// each accepted, handshaken, connection_established, subscribed to a public channel and
// confirmed, then idle; it reports allocations and bytes allocated per connection (whole
// process, this client included) and retained heap+stack per connection after GC.
func TestConnCostMeasure(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("CONNCOST_N"))
	if n == 0 {
		t.Skip("CONNCOST_N unset")
	}
	ts := newServer(t)
	addr := ts.ts.Listener.Addr().String()
	req := []byte("GET /app/" + ts.app.Key + "?protocol=7&client=js&version=8.4.0 HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Sec-WebSocket-Version: 13\r\n\r\n")
	sub := []byte(`{"event":"pusher:subscribe","data":{"channel":"room"}}`)
	subFrame := append([]byte{0x81, 0x80 | byte(len(sub)), 0, 0, 0, 0}, sub...)
	buf := make([]byte, 8<<10)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	until := func(c net.Conn, want []byte) {
		got := 0
		for !bytes.Contains(buf[:got], want) {
			_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
			m, err := c.Read(buf[got:])
			if err != nil && err != io.EOF {
				t.Fatalf("waiting for %s: %v (%q)", want, err, buf[:got])
			}
			got += m
		}
	}
	open := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		until(c, []byte("connection_established"))
		if _, err := c.Write(subFrame); err != nil {
			t.Fatal(err)
		}
		until(c, []byte("subscription_succeeded"))
	}
	for range 50 { // warm up: pools, pollers, flushers, maps
		open()
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
		open()
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
