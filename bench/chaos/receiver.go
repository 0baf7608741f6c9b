package main

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/reverbgo/reverbgo/auth"
)

// receiver is the webhook endpoint: it answers most POSTs 200, some 500, and some only after
// hanging past the node's POST timeout, and records every member_added it accepted.
type receiver struct {
	addr   string
	srv    *http.Server
	mu     sync.Mutex
	seen   map[[2]string]bool // (channel, user) of accepted member_added events
	posts  atomic.Int64
	failed atomic.Int64
	hung   atomic.Int64
	hang   time.Duration
}

func startReceiver(hang time.Duration) (*receiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: l.Addr().String(), seen: map[[2]string]bool{}, hang: hang}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

func (r *receiver) url() string { return "http://" + r.addr + "/hook" }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 4<<20))
	if err != nil {
		return
	}
	r.posts.Add(1)
	if !auth.Equal(req.Header.Get("X-Pusher-Signature"), auth.HMACHex(appSecret, body)) {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	switch x := rand.IntN(100); {
	case x < 10:
		r.failed.Add(1)
		http.Error(w, "flaky", http.StatusInternalServerError)
		return
	case x < 15:
		r.hung.Add(1)
		select { // past the node's POST timeout: it gives up, and must retry
		case <-time.After(r.hang):
		case <-req.Context().Done():
		}
		return
	}
	var b struct {
		Events []struct {
			Name    string `json:"name"`
			Channel string `json:"channel"`
			UserID  string `json:"user_id"`
		} `json:"events"`
	}
	if json.Unmarshal(body, &b) != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, e := range b.Events {
		if e.Name == "member_added" {
			r.seen[[2]string{e.Channel, e.UserID}] = true
		}
	}
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) has(channel, user string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[[2]string{channel, user}]
}
