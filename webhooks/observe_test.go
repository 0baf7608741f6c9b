package webhooks

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

type hookRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *hookRecorder) WebhookSent(app, url string, events, attempts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("sent %s %s %d %d", app, url, events, attempts))
}

func (r *hookRecorder) WebhookFailed(app, url string, events, attempt int, err string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("failed %s %s %d %d %s", app, url, events, attempt, err))
}

func (r *hookRecorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// TestObserverSeesAttempts: a failed attempt then the acknowledged retry, with the logged URL
// (no credentials, no query) and, for a network error, never the URL's password.
func TestObserverSeesAttempts(t *testing.T) {
	rcv := newReceiver(t, func(i int) int { return map[bool]int{true: 503, false: 200}[i < 1] })
	rec := &hookRecorder{}
	d := start(t, testOptions(&syncBuffer{}), app("1", "k", "s", hook(rcv.srv.URL+"/hook?token=q")))
	d.SetObserver(rec)
	d.Emit("1", ev("member_added", "a"))
	testutil.WaitFor(t, "delivered", func() bool { return d.Stats().Sent == 1 })
	got := rec.snapshot()
	want := []string{"failed 1 " + rcv.srv.URL + "/hook 1 1 status 503", "sent 1 " + rcv.srv.URL + "/hook 1 2"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}

	// Nothing listens here: the error must not repeat the URL with its password.
	deadAddr := testutil.FreeAddr(t)
	dead := "http://user:pa55word@" + deadAddr + "/x"
	rec2 := &hookRecorder{}
	d2 := start(t, testOptions(&syncBuffer{}), app("2", "k", "s", hook(dead)))
	d2.SetObserver(rec2)
	d2.Emit("2", ev("member_added", "b"))
	testutil.WaitFor(t, "a failed attempt", func() bool { return len(rec2.snapshot()) > 0 })
	if line := rec2.snapshot()[0]; !strings.HasPrefix(line, "failed 2 http://"+deadAddr+"/x 1 1 ") || strings.Contains(line, "pa55word") {
		t.Fatalf("failure line %q", line)
	}
	d.SetObserver(nil)
	d2.SetObserver(nil)
}
