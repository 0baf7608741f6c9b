package bridge

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestRaceResultVsTimeout fires many calls with short deadlines while several page goroutines
// answer each one around its deadline. Per call exactly one side wins and both sides agree:
// a 204 means the agent got that result; an agent timeout means every page POST got 409/410
// and the page got a cancel.
func TestRaceResultVsTimeout(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Now = time.Now; o.Limits.PageBurst = 10000 })
	h.clock.mu.Lock()
	h.clock.t = time.Now() // signatures use the harness clock
	h.clock.mu.Unlock()
	h.withManifest(client1, 1)

	const calls, answerers, maxRounds = 60, 3, 20
	var mu sync.Mutex
	codes := map[string][]int{}
	var pages sync.WaitGroup
	h.pub.onPub = func(p published) {
		m := decodeEvent(t, p)
		if m.Type != "call" {
			return
		}
		for i := 0; i < answerers; i++ {
			pages.Add(1)
			go func() {
				defer pages.Done()
				time.Sleep(time.Duration(rand.IntN(12000)) * time.Microsecond)
				data := fmt.Sprintf(`{"status":"ok","data":%d}`, i)
				code := h.page("1.1", "c1", resultMsg(client1, m.ID, data)).Code
				mu.Lock()
				codes[m.ID] = append(codes[m.ID], code)
				mu.Unlock()
			}()
		}
	}
	// One round of concurrent calls; returns how many timed out and how many got a result.
	round := func() (timeouts, answered int) {
		results := make(chan callResp, calls)
		var agents sync.WaitGroup
		for i := 0; i < calls; i++ {
			agents.Add(1)
			go func() {
				defer agents.Done()
				results <- recv(t, h.startCall(context.Background(), "calls",
					`{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":{},"timeout_ms":6}`))
			}()
		}
		agents.Wait()
		pages.Wait()
		close(results)
		cancels := map[string]bool{}
		for _, p := range h.pub.all() {
			if m := decodeEvent(t, p); m.Type == "cancel" {
				cancels[m.ID] = true
			}
		}
		for r := range results {
			got := codes[r.ID]
			n204 := 0
			for _, c := range got {
				switch c {
				case http.StatusNoContent:
					n204++
				case http.StatusConflict, http.StatusGone:
				default:
					t.Fatalf("%s: page got %d", r.ID, c)
				}
			}
			timedOut := string(r.Result) == `{"status":"timeout"}`
			switch {
			case timedOut && (n204 != 0 || !cancels[r.ID]):
				t.Fatalf("%s: agent timed out but page codes %v, cancel %v", r.ID, got, cancels[r.ID])
			case !timedOut && (n204 != 1 || cancels[r.ID]):
				t.Fatalf("%s: agent got %s but page codes %v, cancel %v", r.ID, r.Result, got, cancels[r.ID])
			}
			if timedOut {
				timeouts++
			} else {
				answered++
			}
		}
		return timeouts, answered
	}
	// Both outcomes must happen, or the test proves nothing about the race: rounds go on
	// until each was seen (a loaded machine can push a whole round to one side).
	var timeouts, wins int
	for r := 0; r < maxRounds && (timeouts == 0 || wins == 0); r++ {
		to, w := round()
		timeouts, wins = timeouts+to, wins+w
	}
	if timeouts == 0 || wins == 0 {
		t.Fatalf("after %d rounds of %d calls: %d timeouts, %d results: the race was not exercised", maxRounds, calls, timeouts, wins)
	}
	t.Logf("outcomes: %d timeouts, %d results", timeouts, wins)
}

func TestRaceDuplicateResults(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 1)
	ch := h.startCall(context.Background(), "calls", callBody)
	call := h.pub.waitMsg(t, "call", "")
	const n = 32
	codes := make(chan int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes <- h.page("1.1", "c1", resultMsg(client1, call.ID, `{"status":"ok"}`)).Code
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[204] != 1 || count[409] != n-1 {
		t.Fatalf("codes %v", count)
	}
	if r := recv(t, ch); string(r.Result) != `{"status":"ok"}` {
		t.Fatalf("got %+v", r)
	}
}
