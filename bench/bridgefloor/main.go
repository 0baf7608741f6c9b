// Command bridgefloor is the floor of the bridge benchmark: the least a Go server must do to
// carry a Toolmark call over the same wire as reverbgo, so that bridgebench's server CPU per
// call and added latency against it show what the transport alone costs on this machine
// (as pusherbench's rawserver is the floor of the Pusher benchmarks).
//
// Per call it does only what the wire needs:
//   - the agent's POST /apps/{id}/toolmark/calls is read and decoded (encoding/json), given a
//     random call id, and held by its net/http handler goroutine, which writes the call frame
//     (toolmark.message on private-toolmark.{user}.{conversation}, the framing reverbgo uses)
//     to the conversation's page socket itself, under that socket's write mutex;
//   - the page's POST /toolmark/bridge/{conversation} of the result is decoded and handed to
//     the waiting agent request (a map lookup and a channel send), answered 204;
//   - the agent's request is answered 200 {"id":…,"result":…} or {"status":"timeout"}.
//
// Set-up is the same wire too: a Pusher socket at /app/{key} (gorilla/websocket, one reader
// goroutine per socket; connection_established, subscription_succeeded for any channel,
// pusher:pong) and the page's manifest POST, which names the socket (X-Socket-ID) that
// carries the conversation's calls.
//
// It leaves out everything else reverbgo does: no request signature, channel auth, page
// token (toolmark.session) or id validation; no manifest, tool, binding or claim checks; no
// audit log, metrics, rate or in-flight limits, body or message size limits; no cancel or
// describe; no MCP endpoint; no write deadlines; no presence, client events or HTTP API. Its
// JSON is encoding/json, where reverbgo uses faster hand-written encoders and decoders, and
// its WebSocket is gorilla, where reverbgo has its own: the floor is, if anything, generous
// to itself in JSON and stingy in nothing else. HTTP is net/http with reverbgo's settings
// (HTTP/1.1 and h2c on the plain port, the same header and idle timeouts).
//
//	bridgefloor --port 16421 [--debug-addr 127.0.0.1:16497] [--lifetime 1h]
//
// It listens on loopback only and stops by itself after --lifetime.
package main

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	_ "net/http/pprof" // on --debug-addr only (the DefaultServeMux); the bench's mux is separate
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// sock is one page's Pusher socket. Only its reader goroutine reads; writes (control replies
// from the reader, call frames from agent handlers) hold mu, as gorilla requires.
type sock struct {
	ws    *websocket.Conn
	id    string
	mu    sync.Mutex
	convs []string // conversations whose calls go to this socket (under floor.mu)
}

// page is where a conversation's calls go: the socket its manifest named, and its clientId.
type page struct {
	s        *sock
	clientID string
}

// floor is the server: sockets by socket id, pages by conversation, and the agent requests
// waiting for their results by call id.
type floor struct {
	up websocket.Upgrader

	mu      sync.Mutex
	socks   map[string]*sock
	pages   map[string]page
	pending map[string]chan json.RawMessage
}

func newFloor() *floor {
	return &floor{
		up:      websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }},
		socks:   map[string]*sock{},
		pages:   map[string]page{},
		pending: map[string]chan json.RawMessage{},
	}
}

// handler is the bench's mux.
func (f *floor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /app/{key}", f.handleWS)
	mux.HandleFunc("POST /toolmark/bridge/{conv}", f.handlePage)
	mux.HandleFunc("POST /apps/{id}/toolmark/calls", f.handleCall)
	return mux
}

// event is a Pusher frame; data is a JSON string except in what clients send.
type event struct {
	Event   string          `json:"event"`
	Channel string          `json:"channel,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// outEvent is a server-to-client Pusher frame.
type outEvent struct {
	Event   string `json:"event"`
	Channel string `json:"channel,omitempty"`
	Data    string `json:"data"`
}

func (s *sock) send(msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ws.WriteMessage(websocket.TextMessage, msg)
}

func (f *floor) handleWS(w http.ResponseWriter, r *http.Request) {
	ws, err := f.up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered
	}
	ws.SetReadLimit(64 << 10)
	s := &sock{ws: ws, id: strconv.FormatUint(uint64(mrand.Uint32()), 10) + "." + strconv.FormatUint(uint64(mrand.Uint32()), 10)}
	f.mu.Lock()
	f.socks[s.id] = s
	f.mu.Unlock()
	est, _ := json.Marshal(struct {
		SocketID        string `json:"socket_id"`
		ActivityTimeout int    `json:"activity_timeout"`
	}{s.id, 120})
	msg, _ := json.Marshal(outEvent{Event: "pusher:connection_established", Data: string(est)})
	if s.send(msg) != nil {
		f.drop(s)
		return
	}
	// The reader gets its own goroutine; the handler's, with the stack net/http grew, ends.
	go f.readLoop(s)
}

var pong = []byte(`{"event":"pusher:pong","data":"{}"}`)

func (f *floor) readLoop(s *sock) {
	defer f.drop(s)
	for {
		_, msg, err := s.ws.ReadMessage()
		if err != nil {
			return
		}
		var ev event
		if json.Unmarshal(msg, &ev) != nil {
			continue
		}
		switch ev.Event {
		case "pusher:ping":
			err = s.send(pong)
		case "pusher:subscribe":
			data := ev.Data
			var str string
			if json.Unmarshal(data, &str) == nil { // data sent as a JSON string
				data = []byte(str)
			}
			var d struct {
				Channel string `json:"channel"`
			}
			if json.Unmarshal(data, &d) != nil || d.Channel == "" {
				continue
			}
			ok, _ := json.Marshal(outEvent{Event: "pusher_internal:subscription_succeeded", Channel: d.Channel, Data: "{}"})
			err = s.send(ok)
		}
		if err != nil {
			return
		}
	}
}

// drop forgets a socket and the conversations it carried, and closes it.
func (f *floor) drop(s *sock) {
	f.mu.Lock()
	delete(f.socks, s.id)
	for _, c := range s.convs {
		if f.pages[c].s == s {
			delete(f.pages, c)
		}
	}
	s.convs = nil
	f.mu.Unlock()
	s.ws.Close()
}

// pageMsg is the part of a page message the floor reads.
type pageMsg struct {
	Type     string          `json:"type"`
	ClientID string          `json:"clientId"`
	ID       string          `json:"id"`
	Result   json.RawMessage `json:"result"`
}

// handlePage is the page's POST: a manifest names the conversation's socket, a result goes
// to the agent request waiting for it.
func (f *floor) handlePage(w http.ResponseWriter, r *http.Request) {
	var m pageMsg
	if !readJSON(w, r, &m, http.StatusBadRequest) {
		return
	}
	switch m.Type {
	case "result":
		f.mu.Lock()
		ch := f.pending[m.ID]
		delete(f.pending, m.ID)
		f.mu.Unlock()
		if ch == nil {
			http.Error(w, "no such call", http.StatusNotFound)
			return
		}
		if m.Result == nil {
			m.Result = json.RawMessage("null")
		}
		ch <- m.Result // buffered (1), and only the one who deleted the entry sends
	case "manifest":
		conv := r.PathValue("conv")
		f.mu.Lock()
		s := f.socks[r.Header.Get("X-Socket-Id")]
		if s != nil {
			f.pages[conv] = page{s: s, clientID: m.ClientID}
			s.convs = append(s.convs, conv)
		}
		f.mu.Unlock()
		if s == nil {
			http.Error(w, "unknown socket", http.StatusBadRequest)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// callReq is the agent's request.
type callReq struct {
	UserID         string          `json:"user_id"`
	ConversationID string          `json:"conversation_id"`
	Tool           string          `json:"tool"`
	Input          json.RawMessage `json:"input"`
	TimeoutMS      int64           `json:"timeout_ms"`
}

// toPage is the call event's data: {"message": {...}}, as reverbgo writes it.
type toPage struct {
	Message struct {
		Protocol int             `json:"protocol"`
		Type     string          `json:"type"`
		ClientID string          `json:"clientId"`
		ID       string          `json:"id"`
		Tool     string          `json:"tool"`
		Input    json.RawMessage `json:"input"`
	} `json:"message"`
}

type callAnswer struct {
	ID     string          `json:"id"`
	Result json.RawMessage `json:"result"`
}

var timeoutResult = json.RawMessage(`{"status":"timeout"}`)

// handleCall is the agent's POST: send the call to the conversation's page, wait for its
// result (or the timeout), answer.
func (f *floor) handleCall(w http.ResponseWriter, r *http.Request) {
	var req callReq
	if !readJSON(w, r, &req, http.StatusUnprocessableEntity) {
		return
	}
	timeout := 30 * time.Second
	if req.TimeoutMS > 0 {
		timeout = time.Duration(req.TimeoutMS) * time.Millisecond
	}
	var tp toPage
	tp.Message.Protocol, tp.Message.Type, tp.Message.ID = 1, "call", rand.Text()
	tp.Message.Tool, tp.Message.Input = req.Tool, req.Input
	if len(tp.Message.Input) == 0 {
		tp.Message.Input = json.RawMessage("null")
	}
	id := tp.Message.ID
	ch := make(chan json.RawMessage, 1)
	f.mu.Lock()
	p, ok := f.pages[req.ConversationID]
	if ok {
		f.pending[id] = ch // before the frame is written, so an instant result finds it
	}
	f.mu.Unlock()
	if !ok {
		http.Error(w, "no page for the conversation", http.StatusNotFound)
		return
	}
	tp.Message.ClientID = p.clientID
	data, _ := json.Marshal(tp)
	frame, _ := json.Marshal(outEvent{Event: "toolmark.message",
		Channel: "private-toolmark." + req.UserID + "." + req.ConversationID, Data: string(data)})
	if err := p.s.send(frame); err != nil {
		f.cancel(id, ch, nil)
		http.Error(w, "page socket: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	t := time.NewTimer(timeout)
	var res json.RawMessage
	select {
	case res = <-ch:
	case <-t.C:
		res = f.cancel(id, ch, timeoutResult)
	case <-r.Context().Done(): // the agent went away
		f.cancel(id, ch, nil)
		t.Stop()
		return
	}
	t.Stop()
	out, _ := json.Marshal(callAnswer{ID: id, Result: res})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// cancel stops waiting for call id: its result if one was handed over meanwhile, else dflt.
func (f *floor) cancel(id string, ch chan json.RawMessage, dflt json.RawMessage) json.RawMessage {
	f.mu.Lock()
	delete(f.pending, id)
	f.mu.Unlock()
	select {
	case res := <-ch:
		return res
	default:
		return dflt
	}
}

func main() {
	fs := flag.NewFlagSet("bridgefloor", flag.ExitOnError)
	host := fs.String("host", "127.0.0.1", "listen address (loopback only)")
	port := fs.Int("port", 16421, "listen port (WebSocket, page and agent HTTP)")
	debug := fs.String("debug-addr", "", "serve net/http/pprof here (loopback; \"\" = off), as reverbgo's --debug-addr")
	lifetime := fs.Duration("lifetime", time.Hour, "stop by itself after this long")
	_ = fs.Parse(os.Args[1:])
	if err := run(*host, *port, *debug, *lifetime); err != nil {
		fmt.Fprintln(os.Stderr, "bridgefloor:", err)
		os.Exit(1)
	}
}

func loopback(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		h = addr
	}
	ip := net.ParseIP(h)
	return h == "localhost" || ip != nil && ip.IsLoopback()
}

func run(host string, port int, debug string, lifetime time.Duration) error {
	if !loopback(host) || debug != "" && !loopback(debug) {
		return errors.New("loopback addresses only")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	if debug != "" {
		dln, err := net.Listen("tcp", debug)
		if err != nil {
			return err
		}
		go func() { _ = http.Serve(dln, nil) }()
	}
	fmt.Fprintf(os.Stderr, "bridgefloor: listening on %s (pid %d), lifetime %s\n", ln.Addr(), os.Getpid(), lifetime)
	srv := newServer(newFloor())
	go func() {
		time.Sleep(lifetime)
		fmt.Fprintln(os.Stderr, "bridgefloor: lifetime reached")
		os.Exit(0)
	}()
	return srv.Serve(ln)
}

// newServer is net/http with cmd/reverbgo's settings for its plain port.
func newServer(f *floor) *http.Server {
	srv := &http.Server{
		Handler:           f.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
		IdleTimeout:       120 * time.Second,
		Protocols:         new(http.Protocols),
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return srv
}

// readJSON decodes r's body (at most 1 MiB) into v, or answers status and reports false.
func readJSON(w http.ResponseWriter, r *http.Request, v any, status int) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || json.Unmarshal(body, v) != nil {
		http.Error(w, "bad body", status)
		return false
	}
	return true
}
