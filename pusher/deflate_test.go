package pusher

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// countedConn counts the bytes a client reads from its socket.
type countedConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// connectCounted connects like ts.connect, offering permessage-deflate when offer is set,
// and returns the client with the counter of bytes it read from the wire.
func connectCounted(t *testing.T, ts *tserver, offer bool) (*client, *atomic.Int64) {
	t.Helper()
	n := new(atomic.Int64)
	d := websocket.Dialer{HandshakeTimeout: waitTimeout, EnableCompression: offer,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // httptest's own certificate
		NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countedConn{Conn: c, n: n}, nil
		}}
	wc, resp, err := d.Dial(ts.wsURL(ts.app.Key, "protocol=7&client=js&version=8.4.0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get("Sec-WebSocket-Extensions") != ""; got != offer {
		t.Fatalf("offer %v, extension answered %v", offer, got)
	}
	c := testutil.NewWSClient(t, wc)
	ts.established(t, c)
	return c, n
}

// With server.compression on, a socket that negotiated permessage-deflate reads a broadcast
// and its own large frames (a presence subscription_succeeded with big user infos, sent
// through a write barrier) compressed, a socket that did not reads them plain, and both
// decode the same events; on the fast path and the portable one, plain and TLS.
func TestCompressionPerSocket(t *testing.T) {
	info := `{"name":"` + strings.Repeat("Ada Lovelace ", 40) + `"}`
	data := `{"order":` + strings.Repeat(`{"id":1,"sku":"SKU-00001","price":"19.99"},`, 60) + `{}}`
	for _, tc := range []struct {
		name string
		opts []serverOpt
	}{{"fast", []serverOpt{withFastListener()}}, {"portable", []serverOpt{withStdListener()}}, {"tls", []serverOpt{withTLS()}}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append(tc.opts, func(s *setup) {
				s.cfg.Server.Compression = config.Compression{Enabled: true, MinBytes: 256, Level: 1}
			})
			ts := newServer(t, opts...)
			zc, zn := connectCounted(t, ts, true)
			pc, pn := connectCounted(t, ts, false)

			room := "presence-room"
			z0, p0 := zn.Load(), pn.Load()
			cd := `{"user_id":"u1","user_info":` + info + `}`
			zs := ts.subscribePresence(zc, room, cd)
			ps := ts.subscribePresence(pc, room, strings.Replace(cd, "u1", "u2", 1))
			if !strings.Contains(zs.DataString(t), "Ada Lovelace") || !strings.Contains(ps.DataString(t), "Ada Lovelace") {
				t.Fatal("subscription_succeeded without the members' info")
			}
			zsub, psub := zn.Load()-z0, pn.Load()-p0
			zc.WaitEvent("pusher_internal:member_added", room) // u2 joining

			z0, p0 = zn.Load(), pn.Load()
			ts.trigger(t, room, "shipped", data)
			ze, pe := zc.WaitEvent("shipped", room), pc.WaitEvent("shipped", room)
			if ze.DataString(t) != data || pe.DataString(t) != data {
				t.Fatal("the event's data differs from what was triggered")
			}
			zb, pb := zn.Load()-z0, pn.Load()-p0
			t.Logf("subscription_succeeded %d vs %d bytes, broadcast %d vs %d bytes", zsub, psub, zb, pb)
			if zb*3 > pb {
				t.Fatalf("the broadcast took %d bytes compressed, %d plain", zb, pb)
			}
			if zsub*2 > psub {
				t.Fatalf("subscription_succeeded took %d bytes compressed, %d plain", zsub, psub)
			}
		})
	}
}

// deflatingSub is a countingSub whose socket negotiated permessage-deflate.
type deflatingSub struct {
	countingSub
	d *ws.Deflater
}

func (s *deflatingSub) Deflater() channels.Compressor {
	if s.d == nil {
		return nil
	}
	return s.d
}
func (s *deflatingSub) SendFrame(f []byte) { s.Send(f) }

// TestPublishAllocsCompressed: with compression on, a publish to N subscribers that
// negotiated it costs the same allocations whatever N is (the frame is compressed once, a
// delivery allocates nothing) and exactly one more than a publish to subscribers that did
// not (the compressed frame), which costs what it costs with compression off.
func TestPublishAllocsCompressed(t *testing.T) {
	testutil.SkipUnderRace(t)
	data := []byte(`{"order":` + strings.Repeat(`{"id":123456,"status":"shipped","items":[1,2,3]},`, 10) + `{}}`)
	d := ws.NewDeflater(ws.Compression{Enabled: true, MinBytes: 256, Level: 1})
	measure := func(compression, negotiated bool, n int) float64 {
		ts := newServer(t, func(s *setup) {
			s.cfg.Server.Compression = config.Compression{Enabled: compression, MinBytes: 256, Level: 1}
		})
		subs := make([]*deflatingSub, n)
		for i := range subs {
			subs[i] = &deflatingSub{countingSub: countingSub{id: "1." + strconv.Itoa(i)}}
			if negotiated {
				subs[i].d = d
			}
			ts.s.Registry().Subscribe(testAppID, "orders", subs[i])
		}
		allocs := testing.AllocsPerRun(200, func() {
			if err := ts.s.Publish(testAppID, "orders", "order.shipped", data); err != nil {
				t.Fatal(err)
			}
		})
		if got := subs[n-1].frames.Load(); got < 200 {
			t.Fatalf("N=%d: last subscriber got %d frames", n, got)
		}
		return allocs
	}
	off := measure(false, false, 1)
	for _, n := range []int{1, 1000} {
		plain, zipped := measure(true, false, n), measure(true, true, n)
		t.Logf("N=%d: compression off %v, on but not negotiated %v, negotiated %v allocations per publish", n, off, plain, zipped)
		if plain != off || zipped != off+1 {
			t.Fatalf("N=%d: %v allocations off, %v on without negotiation, %v negotiated; want %v, %v, %v", n, off, plain, zipped, off, off, off+1)
		}
	}
}
