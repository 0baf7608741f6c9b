package webhooks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/cluster"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// delivery is one request a receiver got.
type delivery struct {
	Header http.Header
	Status int // what the receiver answered
	Body   []byte
	TimeMS int64
	Events []map[string]any
}

// names lists the events' "n" fields (the tests' sequence numbers) or names.
func (dv delivery) names() []string {
	out := make([]string, len(dv.Events))
	for i, e := range dv.Events {
		if s, ok := e["n"].(string); ok {
			out[i] = s
		} else {
			out[i], _ = e["name"].(string)
		}
	}
	return out
}

// receiver is an httptest server that records every request and answers with status(i)
// for the i-th request (0-based). A nil status answers 200.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	got    []delivery
	status func(i int) int
	// block, when set, is waited on before answering (to simulate a slow receiver).
	block chan struct{}
	// arrived gets a value for every request before it blocks.
	arrived chan struct{}
}

func newReceiver(t *testing.T, status func(i int) int) *receiver {
	t.Helper()
	r := &receiver{t: t, status: status, arrived: make(chan struct{}, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.unblock()
		r.srv.Close()
	})
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		r.t.Errorf("read body: %v", err)
	}
	var env struct {
		TimeMS int64            `json:"time_ms"`
		Events []map[string]any `json:"events"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		r.t.Errorf("body is not the webhook envelope: %v: %s", err, body)
	}
	r.mu.Lock()
	i := len(r.got)
	code := http.StatusOK
	if r.status != nil {
		code = r.status(i)
	}
	r.got = append(r.got, delivery{Header: req.Header.Clone(), Status: code, Body: body, TimeMS: env.TimeMS, Events: env.Events})
	block := r.block
	r.mu.Unlock()
	r.arrived <- struct{}{}
	if block != nil {
		<-block
	}
	w.WriteHeader(code)
}

// hold makes every following request wait until unblock.
func (r *receiver) hold() {
	r.mu.Lock()
	r.block = make(chan struct{})
	r.mu.Unlock()
}

func (r *receiver) unblock() {
	r.mu.Lock()
	if r.block != nil {
		close(r.block)
		r.block = nil
	}
	r.mu.Unlock()
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// successful returns the requests that were answered 2xx, in order.
func (r *receiver) successful() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []delivery
	for _, dv := range r.got {
		if dv.Status/100 == 2 {
			out = append(out, dv)
		}
	}
	return out
}

// eventNames flattens the names of every successfully delivered event, in order.
func (r *receiver) eventNames() []string {
	var out []string
	for _, dv := range r.successful() {
		out = append(out, dv.names()...)
	}
	return out
}

// syncBuffer collects log lines (the shared helper).
type syncBuffer = testutil.SyncBuffer

// testOptions are fast settings; each test overrides what it exercises.
func testOptions(logs *syncBuffer) Options {
	return Options{
		BatchWindow: 0,
		FirstRetry:  5 * time.Millisecond,
		RetryFor:    5 * time.Second,
		Hold:        20 * time.Millisecond,
		Logger:      slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// start builds a Dispatcher and closes it when the test ends.
func start(t *testing.T, opts Options, apps ...config.App) *Dispatcher {
	t.Helper()
	d := New(opts)
	d.SetApps(apps)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return d
}

func app(id, key, secret string, hooks ...config.Webhook) config.App {
	return config.App{ID: id, Key: key, Secret: secret, Webhooks: hooks}
}

func hook(url string, types ...string) config.Webhook {
	return config.Webhook{URL: url, EventTypes: types}
}

// ev is a test event with a sequence label n.
func ev(name, n string) Event { return Event{"name": name, "channel": "private-x", "n": n} }

// hmacHex is the receiver's own computation of X-Pusher-Signature.
func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// settled: nothing queued, in flight or held.
func settled(d *Dispatcher) func() bool {
	return func() bool {
		if d.Stats().Pending != 0 {
			return false
		}
		if d.mem == nil {
			return true
		}
		d.mem.mu.Lock()
		defer d.mem.mu.Unlock()
		return len(d.mem.holds) == 0
	}
}

func appsOf(apps ...config.App) []config.App { return apps }

// redisStore is node's store (a new node id when ""), registered with a node registry of its
// own as cmd/reverbgo does (not heartbeating: these tests reap no node).
func redisStore(rdb redis.UniversalClient, prefix, node string) *RedisStore {
	return NewRedisStore(rdb, prefix, cluster.NewRedisNodes(rdb, cluster.RedisNodesOptions{Prefix: prefix, NodeID: node}))
}
