// Command nbioserver is the shared bench's `rawserver` rebuilt on github.com/lesismal/nbio
// (nbhttp + its websocket upgrader: epoll, non-blocking writes, its own RFC 6455 code) instead
// of net/http + gorilla/websocket. It exists to measure, on the same load tool and the same
// scripts, what the well-kept library costs per idle connection, per accepted connection and
// per delivery next to reverbgo's hand-written transport (issue 10). It is a measuring
// instrument, not a server to build on: like rawserver it serves public channels only, its
// HTTP API checks nothing but the app id in the path (no signature, no body_md5), and it stops
// by itself after --lifetime.
//
// What it does is what rawserver does, on nbio:
//   - GET /app/{key} upgrades (unknown key: 404), sends pusher:connection_established, then
//     answers pusher:subscribe / pusher:unsubscribe for public channels (private-/presence-
//     get pusher:subscription_error) and pusher:ping with pusher:pong; anything else is ignored;
//   - POST /apps/{id}/events encodes the event once per channel, frames it once (as gorilla's
//     PreparedMessage does for rawserver and as reverbgo pre-frames), and the handler writes
//     those bytes to every subscriber itself: one non-blocking write per subscriber on nbio's
//     connection (nbio queues what the socket does not take and flushes it on EPOLLOUT), no
//     goroutine per connection, no per-delivery allocation. --write-mode=message uses nbio's
//     websocket WriteMessage instead (it copies the payload into a fresh frame per subscriber),
//     to see what the library's own write path costs;
//   - a channel's subscriber list is a cached immutable slice, rebuilt only after a change.
//
// Reading is nbio's: one poller goroutine (epoll) for all connections, frames parsed by nbio's
// websocket code, messages handed to its task pool in order per connection.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lesismal/nbio/logging"
	"github.com/lesismal/nbio/nbhttp"
	"github.com/lesismal/nbio/nbhttp/websocket"
)

type config struct {
	host, appID, key string
	port             int
	lifetime         time.Duration
	writeTimeout     time.Duration // 0: no deadline (as rawserver's default)
	writeMode        string        // frame | message
	pollers          int
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("nbioserver", flag.ExitOnError)
	var cfg config
	fs.StringVar(&cfg.host, "host", "127.0.0.1", "listen address (loopback only)")
	fs.IntVar(&cfg.port, "port", 6001, "listen port (WebSocket and HTTP API); 0 picks a free port")
	fs.StringVar(&cfg.appID, "app-id", "app-id", "app id accepted in POST /apps/{id}/events (the only thing checked)")
	fs.StringVar(&cfg.key, "key", "app-key", "app key accepted in GET /app/{key}")
	fs.String("secret", "app-secret", "accepted for symmetry with rawserver; NOT checked (no signature verification)")
	fs.DurationVar(&cfg.lifetime, "lifetime", 30*time.Minute, "hard lifetime: the server stops by itself after this long (max 24h)")
	fs.DurationVar(&cfg.writeTimeout, "write-timeout", 0, "deadline for each write to a subscriber (0 = none, as rawserver's default)")
	fs.StringVar(&cfg.writeMode, "write-mode", "frame", "frame: write the once-built frame bytes to each subscriber; message: nbio's WriteMessage per subscriber")
	fs.IntVar(&cfg.pollers, "pollers", 1, "nbio poller goroutines (epoll loops); 1 for the single-core comparison")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: nbioserver --port P [--app-id ID --key KEY --secret S] [--lifetime 30m] [--write-mode frame|message]

The shared bench's rawserver (public channels only, no signature checks) on
github.com/lesismal/nbio instead of gorilla/websocket. Loopback only.

`)
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "nbioserver: unexpected arguments %q\n", fs.Args())
		return 1
	}
	s, err := start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	logf("nbioserver: listening on %s (pid %d), app id %q, key %q, lifetime %s, write timeout %s, write mode %s",
		s.addr, os.Getpid(), cfg.appID, cfg.key, cfg.lifetime, cfg.writeTimeout, cfg.writeMode)
	logf("  reference server only: public channels, HTTP API checks the app id and nothing else (no signatures)")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if v, ok := <-sig; ok {
			s.Close("signal " + v.String())
		}
	}()
	reason := s.Wait()
	signal.Stop(sig)
	sum := summary{Mode: "nbioserver", Listen: s.addr, StopReason: reason,
		UptimeS: round3(time.Since(s.start).Seconds()), Accepted: s.accepted.Load(), Peak: s.peak.Load(),
		Triggers: s.triggers.Load(), Deliveries: s.deliveries.Load(), WriteErrors: s.writeErrors.Load(),
		ServerCPUS: round3(ownCPU().Seconds()), WriteTimeout: cfg.writeTimeout.Seconds(), WriteMode: cfg.writeMode}
	logf("nbioserver stopped (%s) after %.1fs: %d connections accepted (peak %d), %d trigger requests, %d deliveries, %d write errors",
		reason, sum.UptimeS, sum.Accepted, sum.Peak, sum.Triggers, sum.Deliveries, sum.WriteErrors)
	printJSON(sum)
	return 0
}

// server is the whole state: connections, channels and counters.
type server struct {
	cfg    config
	engine *nbhttp.Engine
	up     *websocket.Upgrader
	addr   string
	start  time.Time

	mu      sync.RWMutex
	chans   map[string]*channel
	conns   map[*conn]struct{}
	closing bool

	accepted, peak, triggers, deliveries, writeErrors atomic.Int64

	closeOnce sync.Once
	reason    string
	done      chan struct{}
}

type conn struct {
	ws    *websocket.Conn
	raw   net.Conn // nbio's connection under ws: whole pre-built frames are written here
	id    string
	chans map[string]struct{} // guarded by server.mu
}

type channel struct {
	members map[*conn]struct{}
	snap    []*conn // immutable once built; nil when members changed since
}

// start validates cfg, listens on loopback and serves until Close or the lifetime ends.
func start(cfg config) (*server, error) {
	ip := net.ParseIP(cfg.host)
	if cfg.host == "localhost" {
		ip = net.IPv4(127, 0, 0, 1)
	}
	switch {
	case ip == nil || !ip.IsLoopback():
		return nil, fmt.Errorf("nbioserver: --host %q is not a loopback address", cfg.host)
	case cfg.port < 0 || cfg.port > 65535:
		return nil, fmt.Errorf("nbioserver: bad --port %d", cfg.port)
	case cfg.lifetime <= 0 || cfg.lifetime > 24*time.Hour:
		return nil, errors.New("nbioserver: --lifetime must be in (0, 24h]")
	case cfg.writeTimeout < 0:
		return nil, errors.New("nbioserver: --write-timeout must be >= 0")
	case cfg.appID == "" || cfg.key == "":
		return nil, errors.New("nbioserver: --app-id and --key must not be empty")
	case cfg.writeMode != "frame" && cfg.writeMode != "message":
		return nil, errors.New("nbioserver: --write-mode must be frame or message")
	case cfg.pollers < 1 || cfg.pollers > 64:
		return nil, errors.New("nbioserver: --pollers must be in [1, 64]")
	}
	// nbhttp takes addresses, not a listener: bind here to learn the port (0 = a free one),
	// then hand this very listener to the engine through Config.Listen.
	ln, err := net.Listen("tcp", net.JoinHostPort(ip.String(), strconv.Itoa(cfg.port)))
	if err != nil {
		return nil, err
	}
	logging.SetLevel(logging.LevelError)
	s := &server{cfg: cfg, addr: ln.Addr().String(), start: time.Now(),
		chans: map[string]*channel{}, conns: map[*conn]struct{}{}, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("OK")) })
	mux.HandleFunc("GET /app/{key}", s.handleWS)
	mux.HandleFunc("POST /apps/{id}/events", s.handleEvents)
	handed := false
	s.engine = nbhttp.NewEngine(nbhttp.Config{
		Network: "tcp",
		Addrs:   []string{s.addr},
		Listen: func(network, addr string) (net.Listener, error) {
			if handed || addr != s.addr {
				return nil, fmt.Errorf("nbioserver: unexpected listen %s %s", network, addr)
			}
			handed = true
			return ln, nil
		},
		NPoller:        cfg.pollers,
		Handler:        mux,
		ReadBufferSize: 64 << 10, // one per poller, not per connection
		KeepaliveTime:  2 * time.Minute,
	})
	s.up = websocket.NewUpgrader()
	s.up.Engine = s.engine
	s.up.CheckOrigin = func(*http.Request) bool { return true }
	s.up.KeepaliveTime = 0             // no read deadline, as rawserver (clients answer pings but send none)
	s.up.MessageLengthLimit = 64 << 10 // rawserver's SetReadLimit
	s.up.OnMessage(s.onMessage)
	s.up.OnClose(func(ws *websocket.Conn, _ error) {
		if c, ok := ws.Session().(*conn); ok {
			s.drop(c)
		}
	})
	if err := s.engine.Start(); err != nil {
		ln.Close()
		return nil, err
	}
	go func() { // the hard lifetime
		t := time.NewTimer(cfg.lifetime)
		defer t.Stop()
		select {
		case <-t.C:
			s.Close("lifetime " + cfg.lifetime.String() + " reached")
		case <-s.done:
		}
	}()
	return s, nil
}

// Close stops listening and closes every connection (once).
func (s *server) Close(reason string) {
	s.closeOnce.Do(func() {
		s.reason = reason
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.engine.Shutdown(ctx)
		cancel()
		close(s.done)
	})
}

// Wait blocks until the server is closed and returns why.
func (s *server) Wait() string {
	<-s.done
	return s.reason
}

func (s *server) handleWS(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("key") != s.cfg.key {
		http.Error(w, "unknown app key", http.StatusNotFound)
		return
	}
	ws, err := s.up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered
	}
	c := &conn{ws: ws, raw: ws.UnderlayerConn(), chans: map[string]struct{}{},
		id: strconv.FormatUint(uint64(randUint32()), 10) + "." + strconv.FormatUint(uint64(randUint32()), 10)}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ws.Close()
		return
	}
	s.conns[c] = struct{}{}
	n := int64(len(s.conns))
	s.mu.Unlock()
	ws.SetSession(c)
	s.accepted.Add(1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	est := `{"event":"pusher:connection_established","data":"{\"socket_id\":\"` + c.id + `\",\"activity_timeout\":30}"}`
	if s.send(c, []byte(est)) != nil {
		ws.Close() // OnClose drops it
	}
}

// send writes one control reply (connection_established, pong, subscription answers).
func (s *server) send(c *conn, msg []byte) error {
	if s.cfg.writeTimeout > 0 {
		_ = c.raw.SetWriteDeadline(time.Now().Add(s.cfg.writeTimeout))
	}
	return c.ws.WriteMessage(websocket.TextMessage, msg)
}

var pong = []byte(`{"event":"pusher:pong","data":"{}"}`)

// onMessage handles one client message; nbio calls it in order for each connection.
func (s *server) onMessage(ws *websocket.Conn, mt websocket.MessageType, msg []byte) {
	c, ok := ws.Session().(*conn)
	if !ok || mt != websocket.TextMessage {
		return
	}
	env, ok := decodeEnvelope(msg)
	if !ok {
		return
	}
	var err error
	switch env.Event {
	case "pusher:ping":
		err = s.send(c, pong)
	case "pusher:subscribe", "pusher:unsubscribe":
		ch, ok := subscribeChannel(env.Data)
		if !ok {
			return
		}
		if env.Event == "pusher:unsubscribe" {
			s.unsubscribe(c, ch)
			return
		}
		err = s.send(c, subscribeReply(ch, s.subscribe(c, ch)))
	}
	// client- events and anything else: ignored
	if err != nil {
		ws.Close()
	}
}

// subscribe adds c to the public channel name; it refuses private- and presence- channels.
func (s *server) subscribe(c *conn, name string) bool {
	if !isPublic(name) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := c.chans[name]; ok || c.chans == nil {
		return true
	}
	c.chans[name] = struct{}{}
	ch := s.chans[name]
	if ch == nil {
		ch = &channel{members: map[*conn]struct{}{}}
		s.chans[name] = ch
	}
	ch.members[c] = struct{}{}
	ch.snap = nil
	return true
}

func (s *server) unsubscribe(c *conn, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := c.chans[name]; ok {
		delete(c.chans, name)
		s.leaveLocked(c, name)
	}
}

func (s *server) leaveLocked(c *conn, name string) {
	if ch := s.chans[name]; ch != nil {
		delete(ch.members, c)
		ch.snap = nil
		if len(ch.members) == 0 {
			delete(s.chans, name)
		}
	}
}

// drop removes a closed connection everywhere (nbio's OnClose).
func (s *server) drop(c *conn) {
	s.mu.Lock()
	for name := range c.chans {
		s.leaveLocked(c, name)
	}
	c.chans = nil
	delete(s.conns, c)
	s.mu.Unlock()
}

// subscribers returns the channel's current subscriber slice (never modified after it is returned).
func (s *server) subscribers(name string) []*conn {
	s.mu.RLock()
	ch := s.chans[name]
	var subs []*conn
	if ch != nil {
		subs = ch.snap
	}
	s.mu.RUnlock()
	if ch == nil || subs != nil {
		return subs
	}
	s.mu.Lock()
	if ch.snap == nil && len(ch.members) > 0 {
		ch.snap = make([]*conn, 0, len(ch.members))
		for c := range ch.members {
			ch.snap = append(ch.snap, c)
		}
	}
	subs = ch.snap
	s.mu.Unlock()
	return subs
}
