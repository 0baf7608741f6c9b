package main

import (
	"context"
	"time"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// event is a Pusher frame as the soak reads it.
type event = pusherclient.Frame

// sock is one Pusher client connection.
type sock = pusherclient.Conn

func (s *soak) app() pusherclient.App {
	return pusherclient.App{ID: s.appID, Key: s.key, Secret: s.secret}
}

// dial connects to app key and waits for connection_established.
func (s *soak) dial(ctx context.Context) (*sock, error) {
	return pusherclient.Dial(ctx, s.addr, s.app(), "soak", 10*time.Second)
}

// subscribe sends pusher:subscribe, signed for private- and presence- channels (presence
// with user as user_id), and returns the frames up to subscription_succeeded (inclusive).
func (s *soak) subscribe(c *sock, channel, user string) ([]event, error) {
	return c.Subscribe(s.app(), channel, user)
}

// api sends a signed Pusher HTTP API request and returns the status and body.
func (s *soak) api(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	return pusherclient.API(ctx, s.http, s.addr, s.app(), method, path, nil, body)
}

// closedQuietly reports whether err is what ending a socket ourselves looks like.
func closedQuietly(err error) bool { return pusherclient.ClosedQuietly(err) }
