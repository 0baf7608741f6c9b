package channels_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/channels/channelstest"
	"github.com/reverbgo/reverbgo/ws"
)

func TestMemoryHistory(t *testing.T) {
	clock := time.Unix(1000, 0)
	channelstest.RunHistory(t, func(t *testing.T) channels.History {
		h := channels.NewMemoryHistory()
		channels.SetHistoryClock(h, func() time.Time { return clock })
		return h
	}, func(t *testing.T, _ channels.History, _, _ string) {
		clock = clock.Add(2 * time.Minute) // past the suite's one-minute TTL
	})
}

func TestMemoryHistorySweep(t *testing.T) {
	clock := time.Unix(1000, 0)
	h := channels.NewMemoryHistory()
	channels.SetHistoryClock(h, func() time.Time { return clock })
	lim := channels.HistoryLimits{Size: 2, TTL: time.Minute}
	_, _, _ = h.Append(t.Context(), "a", "c", lim, "", ws.TextFrame([]byte(`{"event":"e"}`)), nil)
	clock = clock.Add(2 * time.Minute)
	h.Sweep(time.Minute)
	if n := channels.HistoryChannels(h); n != 0 {
		t.Fatalf("%d channels kept after their TTL", n)
	}
}

func TestAppendSerial(t *testing.T) {
	for _, n := range []int{10, 120, 200, 70000} { // 2-, 4- and 10-byte headers, and crossing 125
		data := bytes.Repeat([]byte("x"), n)
		in := ws.TextFrame([]byte(`{"event":"e","data":"` + string(data) + `"}`))
		out := channels.AppendSerial(in, 42)
		want := ws.TextFrame([]byte(`{"event":"e","data":"` + string(data) + `","serial":42}`))
		if !bytes.Equal(out, want) {
			t.Fatalf("n=%d: AppendSerial differs", n)
		}
		if channels.SerialOf(out) != 42 || channels.SerialOf(in) != 0 {
			t.Fatalf("n=%d: SerialOf = %d / %d", n, channels.SerialOf(out), channels.SerialOf(in))
		}
	}
	for _, p := range []string{`{"event":"e","data":"1"}`, `{"serial":}`, `{"x":"\"serial\":5}`, `{,"serial":7x}`} {
		if s := channels.SerialOf(ws.TextFrame([]byte(p))); s != 0 {
			t.Errorf("SerialOf(%s) = %d", p, s)
		}
	}
}
