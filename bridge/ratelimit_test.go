package bridge

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// drainPageBucket spends socket s1's page tokens with `changed` messages until one is refused.
// The harness clock stands still, so the bucket stays empty afterwards.
func drainPageBucket(t *testing.T, h *harness) {
	t.Helper()
	changed := `{"protocol":1,"type":"changed","clientId":"` + client1 + `","rev":1}`
	for i := 0; i < 1000; i++ {
		switch code := h.page("1.1", "c1", changed).Code; code {
		case http.StatusNoContent:
		case http.StatusTooManyRequests:
			return
		default:
			t.Fatalf("changed: %d", code)
		}
	}
	t.Fatal("the page bucket never ran dry")
}

// waitCalls polls until n call messages were published and returns their ids.
func waitCalls(t *testing.T, h *harness, n int) []string {
	t.Helper()
	var ids []string
	testutil.WaitFor(t, fmt.Sprintf("%d published calls", n), func() bool {
		ids = ids[:0]
		for _, p := range h.pub.all() {
			if m := decodeEvent(t, p); m.Type == TypeCall {
				ids = append(ids, m.ID)
			}
		}
		return len(ids) >= n
	})
	return ids
}

// TestPageRateLimitAnswers: the per-socket page limit never refuses a result or confirmed that
// answers an open binding, still limits everything that answers nothing, and a message it
// refuses changes nothing.
func TestPageRateLimitAnswers(t *testing.T) {
	needsConfirm := func(confirmID string) string {
		return fmt.Sprintf(`{"status":"needs_confirmation","confirmId":%q,"summary":"Send?"}`, confirmID)
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"100 answers in parallel to one page", func(t *testing.T, h *harness) {
			// MaxInFlight (100) calls on one conversation, more than PageBurst (60).
			chans := make([]<-chan callResp, 100)
			for i := range chans {
				chans[i] = h.startCall(context.Background(), "calls", callBody)
			}
			ids := waitCalls(t, h, len(chans))
			codes := make([]int, len(ids))
			var wg sync.WaitGroup
			for i, id := range ids {
				wg.Add(1)
				go func() {
					defer wg.Done()
					codes[i] = h.page("1.1", "c1", resultMsg(client1, id, `{"status":"ok"}`)).Code
				}()
			}
			wg.Wait()
			for i, code := range codes {
				if code != http.StatusNoContent {
					t.Fatalf("result %d: %d", i, code)
				}
			}
			for _, ch := range chans {
				if r := recv(t, ch); string(r.Result) != `{"status":"ok"}` {
					t.Fatalf("agent got %+v", r)
				}
			}
		}},
		{"results answering nothing are limited", func(t *testing.T, h *harness) {
			ch := h.startCall(context.Background(), "calls", callBody)
			id := waitCalls(t, h, 1)[0]
			for i := 0; i < 59; i++ { // PageBurst minus the manifest
				if code := h.page("1.1", "c1", resultMsg(client1, fmt.Sprint("bogus", i), `{"status":"ok"}`)).Code; code != http.StatusNotFound {
					t.Fatalf("bogus result %d: %d", i, code)
				}
			}
			for _, tc := range []struct {
				name, sid, conv, body string
				want                  int
			}{
				{"unknown id", "1.1", "c1", resultMsg(client1, "bogus", `{"status":"ok"}`), 429},
				{"unknown confirmId", "1.1", "c1", confirmedMsg(client1, "nope", `{"status":"ok"}`), 429},
				{"other clientId", "1.1", "c1", resultMsg("tab2", id, `{"status":"ok"}`), 429},
				{"manifest", "1.1", "c1", manifestMsg(client1, 9, ""), 429},
				{"malformed (before the limit)", "1.1", "c1", `{"protocol":1}`, 422},
				{"the open call's answer", "1.1", "c1", resultMsg(client1, id, `{"status":"ok"}`), 204},
				{"its duplicate", "1.1", "c1", resultMsg(client1, id, `{"status":"ok"}`), 429},
				{"another socket's own bucket", "6.1", "c2", resultMsg(client1, "bogus", `{"status":"ok"}`), 404},
			} {
				if code := h.page(tc.sid, tc.conv, tc.body).Code; code != tc.want {
					t.Fatalf("%s: %d, want %d", tc.name, code, tc.want)
				}
			}
			if r := recv(t, ch); string(r.Result) != `{"status":"ok"}` {
				t.Fatalf("agent got %+v", r)
			}
		}},
		{"a refused answer changes nothing", func(t *testing.T, h *harness) {
			first := h.startCall(context.Background(), "calls", callBody)
			id1 := waitCalls(t, h, 1)[0]
			second := h.startCall(context.Background(), "calls", callBody)
			id2 := waitCalls(t, h, 2)[1]
			drainPageBucket(t, h)
			if code := h.page("1.1", "c1", resultMsg(client1, id1, needsConfirm("f1"))).Code; code != 204 {
				t.Fatalf("needs_confirmation: %d", code)
			}
			// f1 is bound, so this would be 409; with no token it is 429, and the call stays open.
			if code := h.page("1.1", "c1", resultMsg(client1, id2, needsConfirm("f1"))).Code; code != 429 {
				t.Fatalf("reused confirmId: %d", code)
			}
			if code := h.page("1.1", "c1", resultMsg(client1, id2, `{"status":"ok"}`)).Code; code != 204 {
				t.Fatalf("second call's answer: %d", code)
			}
			recv(t, first)
			if r := recv(t, second); string(r.Result) != `{"status":"ok"}` {
				t.Fatalf("agent got %+v", r)
			}
		}},
		{"a late answer refused by the limit leaves the timeout to the waiter", func(t *testing.T, h *harness) {
			ctx, cancel := context.WithCancel(context.Background())
			ch := h.startCall(ctx, "calls", `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","timeout_ms":1000}`)
			id := waitCalls(t, h, 1)[0]
			h.clock.Add(2 * time.Second) // past the deadline: 410 with a token, 429 without
			drainPageBucket(t, h)
			if code := h.page("1.1", "c1", resultMsg(client1, id, `{"status":"ok"}`)).Code; code != 429 {
				t.Fatalf("late result: %d", code)
			}
			cancel()
			if r := recv(t, ch); string(r.Result) != `{"status":"timeout"}` {
				t.Fatalf("agent got %+v", r)
			}
			h.pub.waitMsg(t, "cancel", id)
		}},
		{"confirmed answering its binding is free", func(t *testing.T, h *harness) {
			ch := h.startCall(context.Background(), "calls", callBody)
			id := waitCalls(t, h, 1)[0]
			if code := h.page("1.1", "c1", resultMsg(client1, id, needsConfirm("f1"))).Code; code != 204 {
				t.Fatalf("needs_confirmation: %d", code)
			}
			recv(t, ch)
			drainPageBucket(t, h)
			for i, want := range []int{204, 429} { // then a duplicate, which answers nothing
				if code := h.page("1.1", "c1", confirmedMsg(client1, "f1", `{"status":"ok"}`)).Code; code != want {
					t.Fatalf("confirmed #%d: %d, want %d", i, code, want)
				}
			}
			if n := len(h.hooks.All()); n != 1 {
				t.Fatalf("%d webhooks", n)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil) // default limits: 10/s, burst 60 per socket
			h.withManifest(client1, 5)
			tc.run(t, h)
		})
	}
}
