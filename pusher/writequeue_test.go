package pusher

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/ws"
)

// serverFrame is one frame as a strict client reads it.
type serverFrame struct {
	op      byte
	payload []byte
}

// readServerFrame reads one frame strictly (testutil.ReadServerFrame).
func readServerFrame(r *bufio.Reader) (serverFrame, error) {
	f, err := testutil.ReadServerFrame(r)
	return serverFrame{op: f.Op, payload: f.Payload}, err
}

// A client whose socket is full (large broadcasts, a slow link) subscribes to channel after
// channel while the writer is in the middle of partial writes: every frame must still parse
// and each channel's subscription_succeeded must precede that channel's events. The old
// queue, which inserted subscription_succeeded at an index remembered before a partial
// write put its remainder back at the front, cut frames in half here.
func TestWriteQueueSurvivesPartialWrites(t *testing.T) {
	// The interleaving, made deterministic: a 1 MiB broadcast leaves the writer with a
	// remainder (t=0) and the writer holds it 30 ms before taking the lock again; the
	// presence subscribe sent at t=1 ms reads the member list (20 ms, as a slow Redis), so
	// it begins holding frames back at about t=21 ms and lets subscription_succeeded go at
	// about t=41 ms, after the writer dealt with its remainder.
	ws.TestHookPartialWrite = func() { time.Sleep(30 * time.Millisecond) }
	t.Cleanup(func() { ws.TestHookPartialWrite = nil })
	store := &slowPresence{PresenceStore: channels.NewMemoryPresence(), delay: 20 * time.Millisecond}
	reg := channels.NewRegistry(channels.Options{Presence: store})
	ts := newServer(t, withOptions(func(o *Options) { o.MaxQueueBytes = 256 << 20; o.Registry = reg }))
	raw := rawDial(t, ts.ts.Listener.Addr().String(), "/app/"+ts.app.Key+"?protocol=7")
	_ = raw.nc.(*net.TCPConn).SetReadBuffer(128 << 10) // slow, but not a 4 KiB trickle
	raw.writeText(t, `{"event":"pusher:subscribe","data":{"channel":"big"}}`)
	testutil.WaitFor(t, "subscribed to big", func() bool { return ts.s.Registry().SubscriptionCount(testAppID, "big") == 1 })
	// A slow link: the server's socket takes 64 KiB at a time, so a 1 MiB frame always
	// leaves the non-blocking write with a remainder.
	ts.s.sockets.each(func(c *Conn) {
		_ = c.ws.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10) })
	})

	const channels = 50
	const bigSize = 1 << 20
	bigData := []byte(`"` + strings.Repeat("b", bigSize) + `"`)

	var (
		mu        sync.Mutex
		succeeded = map[string]bool{}
		ticks     = map[string]int{}
		readErr   error
		bigs      atomic.Int64
	)
	done := make(chan struct{})
	go func() { // the slow reader: checks every frame as it comes
		defer close(done)
		br := bufio.NewReaderSize(&testutil.SlowReader{R: raw.nc, Piece: 64 << 10, Pause: 100 * time.Microsecond}, 64<<10)
		for {
			f, err := readServerFrame(br)
			if err != nil {
				mu.Lock()
				readErr = err
				mu.Unlock()
				return
			}
			if f.op != ws.OpText {
				continue
			}
			var ev struct {
				Event   string `json:"event"`
				Channel string `json:"channel"`
			}
			if err := json.Unmarshal(f.payload, &ev); err != nil {
				mu.Lock()
				readErr = fmt.Errorf("frame of %d bytes is not one JSON event: %v (starts %.60q)", len(f.payload), err, f.payload)
				mu.Unlock()
				return
			}
			mu.Lock()
			switch {
			case ev.Event == "big":
				bigs.Add(1)
			case ev.Event == "pusher_internal:subscription_succeeded":
				succeeded[ev.Channel] = true
			case ev.Event == "tick":
				if !succeeded[ev.Channel] {
					readErr = fmt.Errorf("tick on %s before its subscription_succeeded", ev.Channel)
				}
				ticks[ev.Channel]++
			}
			stop := readErr != nil || (len(succeeded) == channels+1 && len(ticks) == channels && bigs.Load() >= channels)
			mu.Unlock()
			if stop {
				return
			}
		}
	}()

	// 1 MiB broadcasts on "big", one after another, each followed at once by a subscribe,
	// so the subscribe meets the writer in the middle of the broadcast's partial writes;
	// ticks all the time on the channel being subscribed (only: the rest of the queue stays
	// empty, as for a client that gets nothing but the broadcasts).
	var current atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
			_ = ts.s.Publish(testAppID, channelName(int(current.Load())), "tick", []byte(fmt.Sprint(n)))
		}
	}()
	var sid string // the 101's read swallowed connection_established: ask the server
	ts.s.sockets.each(func(c *Conn) { sid = c.socketID })
	for i := 0; i < channels; i++ {
		current.Store(int64(i))
		_ = ts.s.Publish(testAppID, "big", "big", bigData)
		time.Sleep(time.Millisecond)
		name := channelName(i)
		if i%2 == 0 {
			raw.writeText(t, fmt.Sprintf(`{"event":"pusher:subscribe","data":{"channel":%q}}`, name))
		} else {
			cd := fmt.Sprintf(`{"user_id":"u%d"}`, i)
			msg, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
				"channel": name, "channel_data": cd, "auth": presenceAuth(ts.app.Key, ts.app.Secret, sid, name, cd)}})
			raw.writeText(t, string(msg))
		}
		deadline := time.Now().Add(10 * time.Second)
		for bigs.Load() <= int64(i) && time.Now().Before(deadline) && !isDone(done) {
			time.Sleep(time.Millisecond)
		}
	}
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Error("the reader did not see every channel subscribed and ticking within 60s")
	}
	close(stop)
	wg.Wait()
	_ = raw.nc.Close()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if readErr != nil && !strings.Contains(readErr.Error(), "use of closed") {
		t.Fatalf("after %d big frames and %d subscriptions: %v", bigs.Load(), len(succeeded), readErr)
	}
	if len(succeeded) != channels+1 || len(ticks) != channels { // +1: big
		t.Fatalf("subscriptions %d, channels ticking %d, want %d", len(succeeded), len(ticks), channels)
	}
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// channelName alternates public and presence channels.
func channelName(i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("ch-%d", i)
	}
	return fmt.Sprintf("presence-ch-%d", i)
}

// slowPresence lists members as a store across a slow network does: after delay.
type slowPresence struct {
	channels.PresenceStore
	delay time.Duration
}

func (p *slowPresence) Members(ctx context.Context, app, channel string) ([]channels.Member, error) {
	time.Sleep(p.delay)
	return p.PresenceStore.Members(ctx, app, channel)
}

// A close that lands while a partial write is pending and a presence subscribe holds a
// barrier open: the stream still parses to the end, ends with the close frame (4200), and
// the subscribe's late answer is never written after it.
func TestWriteQueueCloseDuringPartialWriteAndBarrier(t *testing.T) {
	ws.TestHookPartialWrite = func() { time.Sleep(30 * time.Millisecond) }
	t.Cleanup(func() { ws.TestHookPartialWrite = nil })
	store := &slowPresence{PresenceStore: channels.NewMemoryPresence(), delay: 20 * time.Millisecond}
	reg := channels.NewRegistry(channels.Options{Presence: store})
	ts := newServer(t, withOptions(func(o *Options) { o.MaxQueueBytes = 256 << 20; o.Registry = reg }))
	raw := rawDial(t, ts.ts.Listener.Addr().String(), "/app/"+ts.app.Key+"?protocol=7")
	_ = raw.nc.(*net.TCPConn).SetReadBuffer(128 << 10)
	raw.writeText(t, `{"event":"pusher:subscribe","data":{"channel":"big"}}`)
	testutil.WaitFor(t, "subscribed to big", func() bool { return ts.s.Registry().SubscriptionCount(testAppID, "big") == 1 })
	var conn *Conn
	ts.s.sockets.each(func(c *Conn) {
		conn = c
		_ = c.ws.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 64<<10) })
	})
	bigData := []byte(`"` + strings.Repeat("b", 1<<20) + `"`)

	for round := range 3 {
		_ = ts.s.Publish(testAppID, "big", "big", bigData) // t=0: a partial write, held 30 ms
		time.Sleep(time.Millisecond)
		ch := fmt.Sprintf("presence-close-%d", round)
		cd := `{"user_id":"u"}`
		msg, _ := json.Marshal(map[string]any{"event": "pusher:subscribe", "data": map[string]string{
			"channel": ch, "channel_data": cd, "auth": presenceAuth(ts.app.Key, ts.app.Secret, conn.socketID, ch, cd)}})
		raw.writeText(t, string(msg)) // its barrier opens at about t=21 ms
		if round < 2 {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		time.Sleep(25 * time.Millisecond) // inside both windows
		conn.closeWith(CloseServerShutdown)
	}
	br := bufio.NewReader(raw.nc)
	_ = raw.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	var last serverFrame
	succeeded := 0
	for {
		f, err := readServerFrame(br)
		if err != nil {
			if last.op != ws.OpClose {
				t.Fatalf("stream ended without a close frame (last opcode %#x, %d subscribes answered): %v", last.op, succeeded, err)
			}
			break
		}
		if last.op == ws.OpClose {
			t.Fatalf("frame after the close frame: %.80q", f.payload)
		}
		if f.op == ws.OpText {
			var ev struct {
				Event string `json:"event"`
			}
			if err := json.Unmarshal(f.payload, &ev); err != nil {
				t.Fatalf("frame of %d bytes is not one JSON event: %v", len(f.payload), err)
			}
			if ev.Event == "pusher_internal:subscription_succeeded" {
				succeeded++
			}
		}
		last = f
	}
	if code := binary.BigEndian.Uint16(last.payload); code != 4200 {
		t.Fatalf("close code %d, want 4200", code)
	}
	t.Logf("%d subscribes answered before the close", succeeded)
}
