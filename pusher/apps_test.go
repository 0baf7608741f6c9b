package pusher

import (
	"sync"
	"testing"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/config"
)

// reloaded is the test app's configuration with fn applied, as a new config's apps.
func reloaded(ts *tserver, fn func(*config.App)) []config.App {
	app := *ts.app
	fn(&app)
	return []config.App{app}
}

// TestReloadAppsSecret: after a new secret, a socket connected before verifies channel
// auth and user auth (signin) with the new secret, and refuses the old one.
func TestReloadAppsSecret(t *testing.T) {
	tests := []struct {
		name string
		try  func(ts *tserver, c *client, secret string)
		ok   string // the event a valid signature gets
	}{
		{"private channel", func(ts *tserver, c *client, secret string) {
			c.SubscribeMsg("private-x", privateAuth(ts.app.Key, secret, c.SocketID, "private-x"), "")
		}, "pusher_internal:subscription_succeeded"},
		{"presence channel", func(ts *tserver, c *client, secret string) {
			data := `{"user_id":"u1"}`
			c.SubscribeMsg("presence-x", presenceAuth(ts.app.Key, secret, c.SocketID, "presence-x", data), data)
		}, "pusher_internal:subscription_succeeded"},
		{"user auth", func(ts *tserver, c *client, secret string) {
			data := `{"id":"u1"}`
			c.Send(map[string]any{"event": "pusher:signin", "data": map[string]any{
				"auth": ts.app.Key + ":" + auth.SigninSignature(secret, c.SocketID, data), "user_data": data}})
		}, "pusher:signin_success"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newServer(t)
			old := ts.app.Secret
			c := ts.connect(t)
			ch := ts.s.ReloadApps(reloaded(ts, func(a *config.App) { a.Secret = "rotated" }))
			if len(ch.Changed) != 1 || len(ch.Added)+len(ch.Removed)+len(ch.Disabled) != 0 {
				t.Fatalf("changes %+v", ch)
			}
			tt.try(ts, c, old)
			if code, _ := c.WaitError(); code != 4009 {
				t.Fatalf("old secret: error %d, want 4009", code)
			}
			c2 := ts.connect(t)
			tt.try(ts, c2, "rotated")
			c2.WaitEvent(tt.ok, "")
			if c2.IsClosed() {
				t.Fatal("closed")
			}
		})
	}
}

// TestReloadAppsRemovedAndDisabled: a removed app's sockets get 4001 and new ones are
// refused 4001; a disabled app's get 4003; an unchanged reload closes nothing.
func TestReloadAppsRemovedAndDisabled(t *testing.T) {
	tests := []struct {
		name string
		apps func(ts *tserver) []config.App
		code int // 0: the socket stays open
	}{
		{"unchanged", func(ts *tserver) []config.App { return reloaded(ts, func(*config.App) {}) }, 0},
		{"removed", func(ts *tserver) []config.App {
			return []config.App{{ID: "other", Key: "other-key", Secret: "s", AllowedOrigins: []string{"*"}}}
		}, 4001},
		{"disabled", func(ts *tserver) []config.App {
			return reloaded(ts, func(a *config.App) { a.Enabled = boolPtr(false) })
		}, 4003},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := newServer(t)
			c := ts.connect(t)
			ts.s.ReloadApps(tt.apps(ts))
			if tt.code == 0 {
				c.ExpectNone("pusher:error", "")
				return
			}
			if code := c.WaitClose(); code != tt.code {
				t.Fatalf("close %d, want %d", code, tt.code)
			}
			c2, err := dial(t, ts.wsURL(ts.app.Key, "protocol=7&client=js&version=8.4.0"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if code, _ := c2.WaitError(); code != tt.code {
				t.Fatalf("new socket: error %d, want %d", code, tt.code)
			}
		})
	}
}

// TestReloadAppsConcurrent: reloads swap the apps while sockets connect, subscribe and
// publish (run with -race: the configuration is read without a lock).
func TestReloadAppsConcurrent(t *testing.T) {
	ts := newServer(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ts.s.ReloadApps(reloaded(ts, func(a *config.App) { a.MaxMessageSize = 10000 + i%2 }))
		}
	}()
	for range 20 {
		c := ts.connect(t)
		ts.subscribePrivate(c, "private-race")
		ts.trigger(t, "private-race", "ev", "{}")
		c.WaitEvent("ev", "private-race")
	}
	close(stop)
	wg.Wait()
}
