package pusher

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// The allocation guards of the hot paths (issue 19): a delivery to N subscribers, a ping, a
// client-event relay. Each bound is the count measured when the guard was written (the whole
// process: server, transport and this file's allocation-free client), so a change that adds
// an allocation to one of these paths fails CI. They skip under -race (the detector changes
// the counts); scripts/test.sh runs them once more without it. Timing stays in benchmarks.

// allocClient is a WebSocket client that allocates nothing per frame: frames are masked with
// the zero key (valid under RFC 6455, payload unchanged) and read into one buffer.
type allocClient struct {
	nc  net.Conn
	buf []byte
}

func allocDial(t testing.TB, ts *tserver) *allocClient {
	t.Helper()
	addr := ts.ts.Listener.Addr().String()
	nc, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	req := "GET /app/" + ts.app.Key + "?protocol=7&client=js&version=8.4.0 HTTP/1.1\r\nHost: " + addr +
		"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
		"Sec-WebSocket-Version: 13\r\n\r\n"
	_ = nc.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := io.WriteString(nc, req); err != nil {
		t.Fatal(err)
	}
	// The response head, one byte at a time so no frame after it is swallowed by a buffer.
	var head []byte
	one := make([]byte, 1)
	for len(head) < 4 || string(head[len(head)-4:]) != "\r\n\r\n" {
		if _, err := io.ReadFull(nc, one); err != nil {
			t.Fatalf("handshake: %v (%q)", err, head)
		}
		head = append(head, one[0])
	}
	if string(head[:12]) != "HTTP/1.1 101" {
		t.Fatalf("handshake: %q", head)
	}
	_ = nc.SetDeadline(time.Time{})
	return &allocClient{nc: nc, buf: make([]byte, 64<<10)}
}

// socketID reads connection_established and returns its socket id (setup, not measured).
func (c *allocClient) socketID(t testing.TB) string {
	t.Helper()
	var env struct {
		Event, Data string
	}
	if err := json.Unmarshal(c.read(t), &env); err != nil || env.Event != "pusher:connection_established" {
		t.Fatalf("connection_established: %v %+v", err, env)
	}
	var d struct {
		SocketID string `json:"socket_id"`
	}
	if err := json.Unmarshal([]byte(env.Data), &d); err != nil {
		t.Fatal(err)
	}
	return d.SocketID
}

// read returns the payload of the next text frame; it is valid until the next read.
func (c *allocClient) read(t testing.TB) []byte {
	_ = c.nc.SetReadDeadline(time.Now().Add(waitTimeout))
	h := c.buf[:2]
	if _, err := io.ReadFull(c.nc, h); err != nil {
		t.Fatalf("read frame: %v", err)
	}
	if h[0] != 0x81 {
		t.Fatalf("frame header %#x: want one unfragmented text frame", h[0])
	}
	n := int(h[1] & 0x7F)
	switch n {
	case 126:
		if _, err := io.ReadFull(c.nc, c.buf[:2]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint16(c.buf[:2]))
	case 127:
		if _, err := io.ReadFull(c.nc, c.buf[:8]); err != nil {
			t.Fatal(err)
		}
		n = int(binary.BigEndian.Uint64(c.buf[:8]))
	}
	if n > len(c.buf) {
		t.Fatalf("frame of %d bytes", n)
	}
	p := c.buf[:n]
	if _, err := io.ReadFull(c.nc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *allocClient) write(t testing.TB, frame []byte) {
	if _, err := c.nc.Write(frame); err != nil {
		t.Fatal(err)
	}
}

// maskedText frames msg as a client must (mask bit set), with the zero masking key.
func maskedText(msg string) []byte {
	n := len(msg)
	var b []byte
	switch {
	case n < 126:
		b = []byte{0x81, 0x80 | byte(n)}
	case n <= 0xFFFF:
		b = []byte{0x81, 0x80 | 126, byte(n >> 8), byte(n)}
	default:
		b = binary.BigEndian.AppendUint64([]byte{0x81, 0x80 | 127}, uint64(n))
	}
	return append(append(b, 0, 0, 0, 0), msg...)
}

func (c *allocClient) subscribePrivate(t testing.TB, ts *tserver, socketID, channel string) {
	t.Helper()
	msg, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
		"channel": channel, "auth": privateAuth(ts.app.Key, ts.app.Secret, socketID, channel)}})
	c.write(t, maskedText(string(msg)))
	if p := c.read(t); !json.Valid(p) || !containsAll(p, "subscription_succeeded", channel) {
		t.Fatalf("subscribe %s: %s", channel, p)
	}
}

// containsAll reports whether b holds every part; it allocates nothing.
func containsAll(b []byte, parts ...string) bool {
	for _, p := range parts {
		if !bytes.Contains(b, unsafe.Slice(unsafe.StringData(p), len(p))) {
			return false
		}
	}
	return true
}

// TestPublishAllocs: a publish to N local subscribers allocates the same whatever N is (the
// frame is encoded once; a delivery allocates nothing), and no more than the bound.
func TestPublishAllocs(t *testing.T) {
	testutil.SkipUnderRace(t)
	data := []byte(`{"order":{"id":123456,"status":"shipped","items":[1,2,3]}}`)
	const bound = 2 // the count measured when the guard was written
	counts := map[int]float64{}
	for _, n := range []int{1, 1000} {
		ts := newServer(t)
		subs := make([]*countingSub, n)
		for i := range subs {
			subs[i] = &countingSub{id: "1." + strconv.Itoa(i)}
			ts.s.Registry().Subscribe(testAppID, "orders", subs[i])
		}
		counts[n] = testing.AllocsPerRun(200, func() {
			if err := ts.s.Publish(testAppID, "orders", "order.shipped", data); err != nil {
				t.Fatal(err)
			}
		})
		if got := subs[n-1].frames.Load(); got < 200 {
			t.Fatalf("N=%d: last subscriber got %d frames", n, got)
		}
	}
	t.Logf("allocations per publish: %v (N=1), %v (N=1000)", counts[1], counts[1000])
	if counts[1000] != counts[1] || counts[1] > bound {
		t.Fatalf("allocations per publish: %v (N=1) and %v (N=1000); want equal and at most %d", counts[1], counts[1000], bound)
	}
}

// TestSocketPathAllocs: a ping answered with a pong, a client event relayed to another
// socket, and a publish delivered to 10 real sockets, each over the real transport.
func TestSocketPathAllocs(t *testing.T) {
	testutil.SkipUnderRace(t)
	ts := newServer(t, withApp(func(a *config.App) { a.ClientEventRateLimit = intPtr(0) }))
	a, b := allocDial(t, ts), allocDial(t, ts)
	aid, bid := a.socketID(t), b.socketID(t)
	a.subscribePrivate(t, ts, aid, "private-chat")
	b.subscribePrivate(t, ts, bid, "private-chat")
	subs := []*allocClient{a, b}
	for range 8 {
		c := allocDial(t, ts)
		c.subscribePrivate(t, ts, c.socketID(t), "private-chat")
		subs = append(subs, c)
	}
	ping := maskedText(`{"event":"pusher:ping","data":{}}`)
	relay := maskedText(`{"event":"client-typing","channel":"private-chat","data":{"typing":true,"user":"u1"}}`)
	data := []byte(`{"order":{"id":123456,"status":"shipped","items":[1,2,3]}}`)
	for _, tc := range []struct {
		name  string
		bound float64 // the count measured when the guard was written
		f     func()
	}{
		{"ping", 3, func() {
			a.write(t, ping)
			if p := a.read(t); !containsAll(p, "pusher:pong") {
				t.Fatalf("ping: %s", p)
			}
		}},
		{"client-event relay", 6, func() {
			a.write(t, relay)
			for _, c := range subs[1:] {
				if p := c.read(t); !containsAll(p, "client-typing") {
					t.Fatalf("relay: %s", p)
				}
			}
		}},
		{"publish to 10 sockets", 2, func() {
			if err := ts.s.Publish(testAppID, "private-chat", "order.shipped", data); err != nil {
				t.Fatal(err)
			}
			for _, c := range subs {
				if p := c.read(t); !containsAll(p, "order.shipped") {
					t.Fatalf("publish: %s", p)
				}
			}
		}},
	} {
		tc.f() // warm up
		n := testing.AllocsPerRun(300, tc.f)
		t.Logf("%s: %v allocations", tc.name, n)
		if n > tc.bound {
			t.Errorf("%s: %v allocations per round, want at most %v", tc.name, n, tc.bound)
		}
	}

}
