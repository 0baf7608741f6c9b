package channelstest

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/ws"
)

// eventFrame frames {"event":"e","channel":ch,"data":"<n>"} as the server does.
func eventFrame(ch string, n int) []byte {
	p := `{"event":"e","channel":"` + ch + `","data":"` + strconv.Itoa(n) + `"}`
	return ws.TextFrame([]byte(p))
}

// RunHistory runs the History contract against histories made by newHistory; each
// subtest gets a fresh one. expire, when not nil, makes the channel's history lapse as its
// TTL would (the suite then checks the epoch changes).
func RunHistory(t *testing.T, newHistory func(t *testing.T) channels.History, expire func(t *testing.T, h channels.History, app, ch string)) {
	ctx := context.Background()
	lim := channels.HistoryLimits{Size: 3, TTL: time.Minute}

	t.Run("serials count up from 1 and frames carry them", func(t *testing.T) {
		h := newHistory(t)
		pos, err := h.Position(ctx, "app", "c", lim)
		if err != nil || pos.Serial != 0 || pos.Epoch == "" {
			t.Fatalf("empty position = %+v, %v", pos, err)
		}
		for i := 1; i <= 5; i++ {
			in := eventFrame("c", i)
			serial, out, err := h.Append(ctx, "app", "c", lim, "", in, nil)
			if err != nil || serial != uint64(i) {
				t.Fatalf("append %d: serial %d, %v", i, serial, err)
			}
			if want := channels.AppendSerial(in, serial); !bytes.Equal(out, want) {
				t.Fatalf("append %d: frame %q, want %q", i, out, want)
			}
			if channels.SerialOf(out) != serial {
				t.Fatalf("SerialOf(%q) = %d", out, channels.SerialOf(out))
			}
		}
		pos2, _ := h.Position(ctx, "app", "c", lim)
		if pos2.Serial != 5 || pos2.Epoch != pos.Epoch {
			t.Fatalf("position after 5 = %+v, want serial 5 epoch %q", pos2, pos.Epoch)
		}
		other, _ := h.Position(ctx, "app", "d", lim)
		otherApp, _ := h.Position(ctx, "app2", "c", lim)
		if other.Serial != 0 || otherApp.Serial != 0 {
			t.Fatalf("channels share serials: %+v %+v", other, otherApp)
		}
	})

	t.Run("since returns (N, S] in order, bounded by size", func(t *testing.T) {
		h := newHistory(t)
		var frames [][]byte
		for i := 1; i <= 5; i++ {
			except := ""
			if i == 4 {
				except = "1.2"
			}
			_, out, err := h.Append(ctx, "app", "c", lim, except, eventFrame("c", i), nil)
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, out)
		}
		for _, tc := range []struct {
			after    uint64
			complete bool
			serials  []uint64
		}{
			{5, true, nil},
			{9, true, nil},
			{2, true, []uint64{3, 4, 5}},
			{4, true, []uint64{5}},
			{1, false, nil}, // size 3 keeps 3..5: serial 2 is gone
			{0, false, nil},
		} {
			pos, evs, complete, err := h.Since(ctx, "app", "c", lim, tc.after)
			if err != nil || pos.Serial != 5 || complete != tc.complete || len(evs) != len(tc.serials) {
				t.Fatalf("since %d: pos %+v complete %v events %d, err %v", tc.after, pos, complete, len(evs), err)
			}
			for i, ev := range evs {
				if ev.Serial != tc.serials[i] || !bytes.Equal(ev.Frame, frames[ev.Serial-1]) {
					t.Fatalf("since %d: event %d = serial %d %q", tc.after, i, ev.Serial, ev.Frame)
				}
				if (ev.Serial == 4) != (ev.Except == "1.2") {
					t.Fatalf("since %d: serial %d except %q", tc.after, ev.Serial, ev.Except)
				}
			}
		}
	})

	t.Run("deliver runs in serial order", func(t *testing.T) {
		h := newHistory(t)
		var got []uint64
		for i := 1; i <= 3; i++ {
			_, _, err := h.Append(ctx, "app", "c", lim, "", eventFrame("c", i), func(s uint64, f []byte) {
				if channels.SerialOf(f) != s {
					t.Errorf("deliver frame %q serial %d", f, s)
				}
				got = append(got, s)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(got) != 3 || got[0] != 1 || got[2] != 3 {
			t.Fatalf("delivered %v", got)
		}
	})

	if expire != nil {
		t.Run("expiry changes the epoch and restarts the serials", func(t *testing.T) {
			h := newHistory(t)
			before, _ := h.Position(ctx, "app", "c", lim)
			_, _, _ = h.Append(ctx, "app", "c", lim, "", eventFrame("c", 1), nil)
			expire(t, h, "app", "c")
			after, _, complete, err := h.Since(ctx, "app", "c", lim, 1)
			if err != nil || after.Epoch == before.Epoch || after.Serial != 0 || !complete {
				t.Fatalf("after expiry: %+v complete %v err %v (epoch before %q)", after, complete, err, before.Epoch)
			}
		})
	}
}
