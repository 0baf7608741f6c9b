package main

import (
	"context"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
)

// event is a Pusher frame as the soak reads it.
type event = benchkit.Frame

// sock is one Pusher client connection.
type sock = benchkit.Conn

func (s *soak) app() benchkit.App { return benchkit.App{ID: s.appID, Key: s.key, Secret: s.secret} }

// dial connects to app key and waits for connection_established.
func (s *soak) dial(ctx context.Context) (*sock, error) {
	return benchkit.Dial(ctx, s.addr, s.app(), "soak", 10*time.Second)
}

// subscribe sends pusher:subscribe, signed for private- and presence- channels (presence
// with user as user_id), and returns the frames up to subscription_succeeded (inclusive).
func (s *soak) subscribe(c *sock, channel, user string) ([]event, error) {
	return c.Subscribe(s.app(), channel, user)
}

// api sends a signed Pusher HTTP API request and returns the status and body.
func (s *soak) api(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return benchkit.API(ctx, s.http, s.addr, s.app(), method, path, nil, body)
}

// closedQuietly reports whether err is what ending a socket ourselves looks like.
func closedQuietly(err error) bool { return benchkit.ClosedQuietly(err) }
