package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
)

const soakUser = "soak-user"

// page is one tab of the Toolmark bridge: its socket on private-toolmark.{user}.{conv},
// answering every call by POSTing the input back as the result.
type page struct {
	c     *sock
	conv  string
	cid   string
	token string // from toolmark.session when the server sends one (page_auth: token)
}

// post sends a page message as @toolmark/core's echo transport does.
func (s *soak) post(ctx context.Context, p *page, msg any) (int, string, error) {
	return benchkit.PostPage(ctx, s.http, s.addr, p.conv, p.c.ID, p.token, msg)
}

// openPage connects, subscribes and posts the manifest.
func (s *soak) openPage(ctx context.Context, i int) (*page, error) {
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	p := &page{c: c, conv: fmt.Sprintf("conv-%d", i), cid: fmt.Sprintf("soak-client-%d", i)}
	frames, err := s.subscribe(c, "private-toolmark."+soakUser+"."+p.conv, "")
	if err != nil {
		return nil, err
	}
	for _, f := range frames {
		if token, ok := benchkit.SessionToken(f); ok {
			p.token = token
		}
	}
	st, body, err := s.post(ctx, p, benchkit.EchoManifest(p.cid, "soak.echo"))
	if err != nil || st != http.StatusNoContent {
		return nil, fmt.Errorf("manifest: %d %s %v", st, body, err)
	}
	return p, nil
}

// servePage answers calls until the socket ends.
func (s *soak) servePage(ctx context.Context, p *page, stop <-chan struct{}) {
	sub := &subscriber{c: p.c}
	s.listen(sub, "-", stop, func(ev event) {
		id, input, ok := benchkit.Call(ev)
		if !ok {
			return
		}
		go func() {
			st, body, err := s.post(ctx, p, benchkit.OKResult(p.cid, id, input))
			if (err != nil || st != http.StatusNoContent) && ctx.Err() == nil {
				s.sample("page result: %d %s %v", st, body, err)
			}
		}()
	})
}

// agent calls the page's tool in a loop through the signed app API; every call must come
// back "ok" with its own input.
func (s *soak) agent(ctx context.Context, p *page, pause time.Duration) {
	path := "/apps/" + s.appID + "/toolmark/calls"
	for seq := 1; ctx.Err() == nil; seq++ {
		body, in := benchkit.EchoCall(soakUser, p.conv, "soak.echo", seq, 10000)
		st, b, err := s.api(ctx, "POST", path, body)
		if ctx.Err() != nil {
			return
		}
		if err != nil || !benchkit.EchoedOK(st, b, in) {
			s.c.callFail.Add(1)
			s.sample("bridge call: %d %.200s %v", st, b, err)
		} else {
			s.c.callOK.Add(1)
		}
		sleepCtx(ctx, pause)
	}
}
