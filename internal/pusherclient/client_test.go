package pusherclient_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/api"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/pusher"
)

var app = pusherclient.App{ID: testutil.TestAppID, Key: testutil.TestKey, Secret: testutil.TestSecret}

// serve starts a pusher.Server with the HTTP API beside it and returns its base URL.
func serve(t *testing.T) string {
	t.Helper()
	cfg := testutil.TestConfig()
	cfg.Apps[0].AcceptClientEventsFrom = "all"
	s := pusher.NewServer(pusher.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	a := api.New(api.Options{Config: cfg, Publisher: s, Info: s, Terminator: s})
	e := echo.New()
	s.Routes(e, "")
	a.Routes(e, "")
	ts := httptest.NewServer(e)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
		ts.Close()
	})
	return ts.URL
}

func TestConnSubscribeTriggerPing(t *testing.T) {
	base := serve(t)
	ctx := context.Background()
	c, err := pusherclient.DialWith(ctx, base, app.Key, pusherclient.Options{Origin: "http://example.com", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.ID == "" {
		t.Fatal("no socket id")
	}
	for _, ch := range []string{"public", "private-a"} {
		if _, err := c.Subscribe(app, ch, ""); err != nil {
			t.Fatalf("%s: %v", ch, err)
		}
	}
	frames, err := c.Subscribe(app, "presence-room", "u1")
	if err != nil {
		t.Fatalf("presence: %v", err)
	}
	if last := frames[len(frames)-1]; last.Event != "pusher_internal:subscription_succeeded" {
		t.Fatalf("presence ended with %s", last.Event)
	}
	if st, err := pusherclient.Trigger(ctx, http.DefaultClient, base, app, "private-a", "one", "1"); err != nil || st != 200 {
		t.Fatalf("trigger: %d %v", st, err)
	}
	f, err := c.UntilWithin("one", "private-a", 5*time.Second)
	if err != nil || f.Str() != "1" {
		t.Fatalf("event: %+v %v", f, err)
	}
	st, _, err := pusherclient.TriggerBatch(ctx, http.DefaultClient, base, app, []pusherclient.Event{{Name: "two", Channel: "public", Data: "2"}})
	if err != nil || st != 200 {
		t.Fatalf("batch: %d %v", st, err)
	}
	if f, err := c.UntilWithin("two", "public", 5*time.Second); err != nil || f.Str() != "2" {
		t.Fatalf("batch event: %+v %v", f, err)
	}
	if err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UntilWithin("pusher:pong", "", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(pusherclient.App{Key: app.Key, Secret: "wrong"}, "private-b", ""); err == nil {
		t.Fatal("a subscription signed with the wrong secret succeeded")
	}
}

func TestListenerClientEvent(t *testing.T) {
	base := serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan pusherclient.Frame, 4)
	rx, err := pusherclient.DialListener(ctx, base, app.Key, pusherclient.Options{}, func(f pusherclient.Frame) { got <- f })
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	tx, err := pusherclient.DialListener(ctx, base, app.Key, pusherclient.Options{Compression: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	for _, l := range []*pusherclient.Listener{rx, tx} {
		if err := l.Subscribe(ctx, app, "private-chat", ""); err != nil {
			t.Fatal(err)
		}
		if _, ok := l.Subscription("private-chat"); !ok {
			t.Fatal("no subscription_succeeded kept")
		}
	}
	if err := tx.ClientEvent("private-chat", "client-hi", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if f.Event != "client-hi" || f.Channel != "private-chat" {
			t.Fatalf("got %s on %s", f.Event, f.Channel)
		}
	case <-ctx.Done():
		t.Fatal("no client event")
	}
	if rx.Dropped() {
		t.Fatal("dropped")
	}
}
