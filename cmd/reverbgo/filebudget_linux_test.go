//go:build linux

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/reverbgo/reverbgo/internal/pusherclient"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

// A node at its connection cap whose every connection has been slow once (its socket
// filled, the blocking writer ran, the client then read everything) still has the
// descriptors its cap promised: the next client is told 4100 "Over capacity", the HTTP API
// answers 200, and nothing in the log says EMFILE. The process runs under an open-file
// limit that fits one descriptor per connection but not two: the slow path's duplicate used
// to stay until the connection closed, so the connections that had been slow ran it out of
// descriptors (their writes failed and they were dropped, accept and the API failed).
func TestCapHoldsAfterEverySocketWasSlow(t *testing.T) {
	const (
		conns     = 40
		nofile    = 80 // about 16 at rest, 40 sockets, a few for the API: not 40 more
		evBytes   = 100 << 10
		maxEvents = 200 // 20 MiB: loopback send buffers grow to 4 MiB
	)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	wrapper := filepath.Join(dir, "reverbgo-nofile")
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s\nulimit -n %d || exit 1\nexec %s \"$@\"\n", pidFile, nofile, testutil.ReverbgoBinary(t))
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	addr := testutil.FreeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	cfg := fmt.Sprintf("server: {host: %s, port: %s, max_connections: %d, max_request_size: 1000000}\n"+
		"apps:\n  - {app_id: fb, key: fb-key, secret: fb-secret, max_message_size: %d}\n", host, port, conns, evBytes+1024)
	p := testutil.StartReverbgo(t, wrapper, addr, cfg)
	pidText, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	fds := func() int {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			t.Fatalf("the process's descriptors: %v", err)
		}
		return len(ents)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hc := &http.Client{Timeout: 10 * time.Second}
	payload := strings.Repeat("x", evBytes)
	clients := make([]*pusherclient.Conn, conns)
	for i := range clients {
		c := dialSmallWindow(t, ctx, p.URL)
		clients[i] = c
		if ev := readEvent(t, c); ev.Event != "pusher:connection_established" {
			t.Fatalf("client %d: first event %s %s", i, ev.Event, ev.Str())
		}
		channel := fmt.Sprintf("slow-%d", i)
		if err := c.Send(pusherclient.SubscribeMessage(pusherclient.App{}, "", channel, "", nil)); err != nil {
			t.Fatal(err)
		}
		if ev := readEvent(t, c); ev.Event != "pusher_internal:subscription_succeeded" {
			t.Fatalf("client %d: %s %s, want subscription_succeeded", i, ev.Event, ev.Str())
		}
		if resp, err := hc.Get(p.URL + "/up"); err != nil { // the keep-alive connection
			t.Fatal(err)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		// One at a time, as sockets fill over a node's life: the client reads nothing
		// while events are published to it until its socket is full, which the blocking
		// writer's duplicate descriptor shows (the API's keep-alive connection is open
		// already); then it reads them all.
		before := fds()
		sent := 0
		for fds() <= before {
			if sent == maxEvents {
				t.Fatalf("client %d: %d events of %d KiB and no slow path descriptor appeared (%d of %d descriptors open)", i, sent, evBytes>>10, fds(), nofile)
			}
			code, err := pusherclient.Trigger(ctx, hc, p.URL, pusherclient.App{ID: "fb", Key: "fb-key", Secret: "fb-secret"}, channel, "big", payload)
			if err != nil || code != http.StatusOK {
				t.Fatalf("client %d: trigger: %d %v\n%s", i, code, err, p.Logs())
			}
			sent++
		}
		for n := 0; n < sent; {
			ev := readEvent(t, c)
			switch {
			case ev.Event == "big":
				n++
			case ev.Event != "pusher:ping":
				t.Fatalf("client %d: %s %.200s", i, ev.Event, ev.Str())
			}
		}
		// Drained, the connection holds one descriptor again once its writer is idle: let
		// that settle (without failing here: what counts is what the node does at its cap).
		for deadline := time.Now().Add(2 * time.Second); fds() > before && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	t.Logf("descriptors: %d", fds())
	// Every connection is still open (a ping is answered), and the node is at its cap.
	for i, c := range clients {
		if err := c.Ping(); err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		if ev := readEvent(t, c); ev.Event != "pusher:pong" {
			t.Fatalf("client %d: %s %s, want pusher:pong", i, ev.Event, ev.Str())
		}
	}
	over := dialSmallWindow(t, ctx, p.URL)
	if ev := readEvent(t, over); ev.Event != "pusher:error" || !strings.Contains(ev.Str(), "4100") {
		t.Fatalf("the client over the cap got %s %s, want pusher:error 4100\n%s", ev.Event, ev.Str(), p.Logs())
	}
	code, err := pusherclient.Trigger(ctx, hc, p.URL, pusherclient.App{ID: "fb", Key: "fb-key", Secret: "fb-secret"}, "slow-0", "small", "{}")
	if err != nil || code != http.StatusOK {
		t.Fatalf("the HTTP API at the cap: %d %v\n%s", code, err, p.Logs())
	}
	if ev := readEvent(t, clients[0]); ev.Event != "small" {
		t.Fatalf("client 0: %s, want the event published at the cap", ev.Event)
	}
	if logs := p.Logs(); strings.Contains(logs, "too many open files") {
		t.Fatalf("EMFILE in the log:\n%s", logs)
	}
}

// dialSmallWindow opens a Pusher WebSocket whose socket has a small receive buffer.
func dialSmallWindow(t *testing.T, ctx context.Context, baseURL string) *pusherclient.Conn {
	t.Helper()
	d := websocket.Dialer{NetDialContext: (&net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
	}}).DialContext}
	c, err := pusherclient.DialWith(ctx, baseURL, "fb-key", pusherclient.Options{Dialer: &d, NoEstablished: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readEvent reads the next Pusher event (within 10 s).
func readEvent(t *testing.T, c *pusherclient.Conn) pusherclient.Frame {
	t.Helper()
	_ = c.WS.SetReadDeadline(time.Now().Add(10 * time.Second))
	ev, err := c.Read()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return ev
}
