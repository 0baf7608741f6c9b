package pusher

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// countingSub is a channels.Subscriber that only counts frames and bytes.
type countingSub struct {
	id     string
	frames atomic.Int64
	bytes  atomic.Int64
}

func (s *countingSub) SocketID() string { return s.id }
func (s *countingSub) Send(f []byte)    { s.frames.Add(1); s.bytes.Add(int64(len(f))) }

// BenchmarkFanoutFrames measures Server.Publish: encode once, fan the frame out.
// "fake" subscribers only count; "ws" subscribers are real sockets read by test clients.
func BenchmarkFanoutFrames(b *testing.B) {
	data := []byte(`{"order":{"id":123456,"status":"shipped","items":[1,2,3]}}`)
	for _, n := range []int{1, 100, 10000} {
		b.Run(fmt.Sprintf("fake-%d", n), func(b *testing.B) {
			ts := newServer(b)
			subs := make([]*countingSub, n)
			for i := range subs {
				subs[i] = &countingSub{id: "1." + strconv.Itoa(i)}
				ts.s.Registry().Subscribe(testAppID, "orders", subs[i])
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := ts.s.Publish(testAppID, "orders", "order.shipped", data); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if got := subs[n-1].frames.Load(); got != int64(b.N) {
				b.Fatalf("last subscriber got %d frames, want %d", got, b.N)
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
	// ws-N runs with the default (adaptive) coalescing, ws-N-coalesce-off with
	// server.write_coalesce_ms: 0; frames/write and writes/delivery say what coalescing saved.
	for _, bc := range []struct {
		n   int
		off bool
	}{{10, false}, {100, false}, {100, true}} {
		n := bc.n
		name := fmt.Sprintf("ws-%d", n)
		if bc.off {
			name += "-coalesce-off"
		}
		b.Run(name, func(b *testing.B) {
			ts := newServer(b, withOptions(func(o *Options) { o.MaxQueueBytes = 256 << 20 }), func(s *setup) {
				if bc.off {
					s.cfg.Server.WriteCoalesceMS = intPtr(0)
				}
			})
			clients := make([]*client, n)
			for i := range clients {
				clients[i] = ts.connect(b)
				clients[i].Subscribe("orders")
				clients[i].CountOnly.Store(true)
				clients[i].Count.Store(0)
			}
			b.ReportAllocs()
			w0 := ts.s.writeCounts()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := ts.s.Publish(testAppID, "orders", "order.shipped", data); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for _, c := range clients {
				for c.Count.Load() < int64(b.N) {
					if c.IsClosed() || time.Now().After(deadline) {
						b.Fatalf("client got %d of %d frames (closed=%v)", c.Count.Load(), b.N, c.IsClosed())
					}
					time.Sleep(100 * time.Microsecond)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "deliveries/s")
			w := ts.s.writeCounts()
			w.Writev -= w0.Writev
			w.URing -= w0.URing
			w.URingEnters -= w0.URingEnters
			w.Blocking -= w0.Blocking
			w.Frames -= w0.Frames
			b.ReportMetric(w.FramesPerWrite(), "frames/write")
			// Write syscalls: the flushers' (a writev per socket, or one io_uring_enter for
			// a round's io_uring SQEs; server.io_uring is on by default) and the blocking
			// writers' batches.
			b.ReportMetric(float64(w.Writev+w.URingEnters+w.Blocking)/float64(b.N*n), "writes/delivery")
		})
	}
}
