package channelstest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
)

// Sink is a fake subscriber that records the frames it was sent.
type Sink struct {
	ID     string
	mu     sync.Mutex
	frames []string
}

// SocketID implements channels.Subscriber.
func (s *Sink) SocketID() string { return s.ID }

// Send implements channels.Subscriber.
func (s *Sink) Send(f []byte) {
	s.mu.Lock()
	s.frames = append(s.frames, string(f))
	s.mu.Unlock()
}

// Frames returns a copy of what was received so far.
func (s *Sink) Frames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.frames)
}

// WaitFor polls until cond holds for the received frames or fails the test after 5s.
func (s *Sink) WaitFor(t testing.TB, what string, cond func([]string) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := s.Frames()
		if cond(got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("socket %s: timed out waiting for %s; got %q", s.ID, what, got)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Subscribe subscribes sub and waits until publishes from any node reach it (the
// registry's WhenRouted): what a client is told by subscription_succeeded.
func Subscribe(t testing.TB, r *channels.Registry, app, ch string, sub channels.Subscriber) {
	t.Helper()
	r.Subscribe(app, ch, sub)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.AwaitRouted(ctx, app, ch); err != nil {
		t.Fatalf("subscription to %s/%s never routed: %v", app, ch, err)
	}
}

// NewCluster builds n nodes that share one broker medium and returns each node's registry.
// A single-node broker (memory) supports n == 1 only.
type NewCluster func(t *testing.T, n int) []*channels.Registry

// RunBroker runs the Broker contract. nodes is how many nodes newCluster can build (1 for
// a single-node broker); the cross-node cases run only when it is at least 2.
func RunBroker(t *testing.T, nodes int, newCluster NewCluster) {
	ctx := context.Background()
	publish := func(t *testing.T, r *channels.Registry, app, ch, frame, except string) {
		t.Helper()
		if err := r.Publish(ctx, channels.Message{AppID: app, Channel: ch, Frame: []byte(frame), Except: except}); err != nil {
			t.Fatalf("publish %s: %v", frame, err)
		}
	}
	// endWith publishes a marker from the same node and waits for it: anything sent before
	// it (a duplicate, a leak into another app) has arrived by then.
	// It returns the frames without markers.
	markers := 0
	endWith := func(t *testing.T, r *channels.Registry, app, ch string, s *Sink) []string {
		t.Helper()
		markers++
		marker := fmt.Sprintf("marker%d", markers)
		publish(t, r, app, ch, marker, "")
		s.WaitFor(t, marker, func(f []string) bool { return slices.Contains(f, marker) })
		var out []string
		for _, f := range s.Frames() {
			if !strings.HasPrefix(f, "marker") {
				out = append(out, f)
			}
		}
		return out
	}
	t.Run("local delivery once with except", func(t *testing.T) {
		r := newCluster(t, 1)[0]
		a, b := &Sink{ID: "1.1"}, &Sink{ID: "1.2"}
		Subscribe(t, r, "app", "news", a)
		Subscribe(t, r, "app", "news", b)
		publish(t, r, "app", "news", "m1", "1.2")
		if got := endWith(t, r, "app", "news", a); !slices.Equal(got, []string{"m1"}) {
			t.Fatalf("subscriber got %q, want [m1] once", got)
		}
		if got := endWith(t, r, "app", "news", b); len(got) != 0 {
			t.Fatalf("excepted socket got %q", got)
		}
	})
	t.Run("binary frames survive", func(t *testing.T) {
		r := newCluster(t, nodes)
		var frame []byte
		for i := range 256 {
			frame = append(frame, byte(i))
		}
		s := &Sink{ID: "2.1"}
		Subscribe(t, r[len(r)-1], "app", "bin", s)
		publish(t, r[0], "app", "bin", string(frame), "")
		s.WaitFor(t, "binary frame", func(f []string) bool { return len(f) == 1 && f[0] == string(frame) })
	})
	if nodes < 2 {
		return
	}
	cases := []struct {
		name   string
		subApp string // app and channel the node-B socket is in
		subCh  string
		except string
		want   []string
	}{
		{"reaches another node", "app1", "news", "", []string{"m"}},
		{"except socket on another node", "app1", "news", "9.9", nil},
		{"except names another socket", "app1", "news", "1.1", []string{"m"}},
		{"apps isolated", "app2", "news", "", nil},
		{"channels isolated", "app1", "other", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			regs := newCluster(t, 2)
			a, b := regs[0], regs[1]
			onA := &Sink{ID: "1.1"}
			onB := &Sink{ID: "9.9"}
			Subscribe(t, a, "app1", "news", onA)
			Subscribe(t, b, tc.subApp, tc.subCh, onB)
			publish(t, a, "app1", "news", "m", tc.except)
			got := endWith(t, a, tc.subApp, tc.subCh, onB)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("node B socket got %q, want %q", got, tc.want)
			}
			wantA := []string{"m"}
			if tc.except == "1.1" {
				wantA = nil
			}
			if got := endWith(t, a, "app1", "news", onA); !slices.Equal(got, wantA) {
				t.Fatalf("publishing node socket got %q, want %q (no double delivery)", got, wantA)
			}
		})
	}
	t.Run("every node reaches every node", func(t *testing.T) {
		regs := newCluster(t, 2)
		sinks := make([]*Sink, len(regs))
		for i, r := range regs {
			sinks[i] = &Sink{ID: fmt.Sprintf("%d.1", i)}
			Subscribe(t, r, "app", "all", sinks[i])
		}
		for i, r := range regs {
			publish(t, r, "app", "all", fmt.Sprintf("from%d", i), "")
		}
		for _, s := range sinks {
			s.WaitFor(t, "one message from each node", func(f []string) bool {
				slices.Sort(f)
				return slices.Equal(f, []string{"from0", "from1"})
			})
		}
	})
}
