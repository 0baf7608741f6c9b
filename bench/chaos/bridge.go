package main

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

const chaosUser = "chaos-user"

// page is one tab of the Toolmark bridge: a socket on private-toolmark.{user}.{conv} on one
// node, its POSTs to a random node, answering every call with its input. It reloads now and
// then (leave and subscribe again at once, on another node): the page-count race of fault 2.
type page struct {
	conv, cid string
	mu        sync.Mutex
	c         *conn
	token     string
	ready     time.Time // when the current socket's manifest was accepted (zero: none)
}

func (p *page) state() (*conn, string, time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c, p.token, p.ready
}

func (s *chaos) postPage(ctx context.Context, n *node, p *page, c *conn, token string, msg any) (int, string, error) {
	return benchkit.PostPage(ctx, apiClient, n.addr, p.conv, c.ID, token, msg)
}

// runPage keeps p open: connect, subscribe, manifest, answer calls; reload every 15-40 s.
func (s *chaos) runPage(ctx context.Context, p *page) {
	for ctx.Err() == nil {
		n := s.cl.pick()
		if n == nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		c, err := dialNode(ctx, n)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		ch := "private-toolmark." + chaosUser + "." + p.conv
		dead := make(chan struct{})
		var once sync.Once
		sessions := make(chan string, 1)
		go func() {
			defer once.Do(func() { close(dead) })
			for {
				f, err := c.Read()
				if err != nil {
					return
				}
				if token, ok := benchkit.SessionToken(f); ok {
					select {
					case sessions <- token:
					default:
					}
				} else if id, input, ok := benchkit.Call(f); ok {
					s.answer(ctx, p, c, id, input)
				}
			}
		}()
		if err := c.Send(pusherclient.SubscribeMessage(chaosApp, c.ID, ch, "", nil)); err != nil {
			c.WS.Close()
			continue
		}
		var token string
		select {
		case token = <-sessions:
		case <-time.After(5 * time.Second): // page_auth: socket_id sends none
		case <-dead:
			continue
		}
		st, body, err := s.postPage(ctx, s.cl.pickOr(n), p, c, token, benchkit.EchoManifest(p.cid, "chaos.echo"))
		if err != nil || st != http.StatusNoContent {
			s.logf("page %s manifest: %d %s %v", p.conv, st, body, err)
			c.WS.Close()
			sleepCtx(ctx, time.Second)
			continue
		}
		p.mu.Lock()
		p.c, p.token, p.ready = c, token, time.Now()
		p.mu.Unlock()
		select {
		case <-dead:
		case <-ctx.Done():
		case <-time.After(time.Duration(15+rand.IntN(25)) * time.Second):
		}
		p.mu.Lock()
		p.ready = time.Time{}
		p.mu.Unlock()
		c.WS.Close()
	}
}

// answer posts the call's input back as its result, to a random node.
func (s *chaos) answer(ctx context.Context, p *page, c *conn, id string, input json.RawMessage) {
	_, token, _ := p.state()
	go func() {
		_, _, _ = s.postPage(ctx, s.cl.pickOr(nil), p, c, token, benchkit.OKResult(p.cid, id, input))
	}()
}

type bridgeStats struct{ ok, failed, excused, wiped atomic.Int64 }

// agent calls the page's tool through a random node's calls API, once a second. A failed
// call counts unless an outage or the page's own reload explains it.
func (s *chaos) agent(ctx context.Context, p *page) {
	path := "/apps/" + appID + "/toolmark/calls"
	for seq := 1; ctx.Err() == nil; seq++ {
		sleepCtx(ctx, time.Second)
		n := s.cl.pick()
		if n == nil {
			continue
		}
		_, _, ready := p.state()
		at := time.Now()
		body, in := benchkit.EchoCall(chaosUser, p.conv, "chaos.echo", seq, 5000)
		st, b, err := api(ctx, n, http.MethodPost, path, nil, body)
		if ctx.Err() != nil {
			return
		}
		if err == nil && benchkit.EchoedOK(st, b, in) {
			s.bridge.ok.Add(1)
			continue
		}
		_, _, readyAfter := p.state()
		settled := !ready.IsZero() && at.Sub(ready) > 2*time.Second && ready.Equal(readyAfter)
		if !settled || s.t.inOutage(at, time.Second, time.Duration(s.o.nodeTimeout+3)*time.Second) {
			s.bridge.excused.Add(1)
			continue
		}
		if w := s.t.lastWipe(); !w.IsZero() && ready.Before(w) && strings.Contains(string(b), "No page is connected") {
			// Redis restarted empty after the page posted its manifest: the manifest is gone
			// until the page posts one again (its next reload); the protocol has no message
			// that asks a page for it. Counted apart, not as a failure (docs/scaling.md, "Redis restarted empty").
			s.bridge.wiped.Add(1)
			continue
		}
		if s.bridge.failed.Add(1) <= 5 {
			s.logf("bridge call on node %d failed: %d %.200s %v", n.i, st, b, err)
		}
	}
}

// pickOr returns a random running node, or n when none is.
func (c *cluster) pickOr(n *node) *node {
	if p := c.pick(); p != nil {
		return p
	}
	return n
}
