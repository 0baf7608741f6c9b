package console

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
)

// Entry is one line of the event log. Data is at most dataPreview bytes of the event's data,
// replaced by a note for channels whose payload the console must not show.
type Entry struct {
	T       int64  `json:"t"` // unix milliseconds
	Kind    string `json:"kind"`
	Channel string `json:"channel,omitempty"`
	Event   string `json:"event,omitempty"`
	Socket  string `json:"socket,omitempty"`
	Size    int    `json:"size,omitempty"`
	Data    string `json:"data,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Code    int    `json:"code,omitempty"`
	Events  int    `json:"events,omitempty"` // webhook batch size
}

// Event log kinds besides pusher.Observed*.
const (
	kindOpened        = "connection_opened"
	kindClosed        = "connection_closed"
	kindSubscribed    = "subscribed"
	kindUnsubscribed  = "unsubscribed"
	kindWebhookSent   = "webhook_sent"
	kindWebhookFailed = "webhook_failed"
)

// call is one Toolmark call the console saw start or end. Never input or result values.
type call struct {
	ID           string `json:"id"`
	Tool         string `json:"tool"`
	Kind         string `json:"kind"`
	User         string `json:"user"`
	Conversation string `json:"conversation"`
	Status       string `json:"status,omitempty"`
	Reason       string `json:"reason,omitempty"`
	LatencyMS    int64  `json:"latency_ms"`
	Started      int64  `json:"started"` // unix ms
	AgeMS        int64  `json:"age_ms,omitempty"`
	at           time.Time
}

// appView is one app's live state in the console.
type appView struct {
	mu sync.Mutex
	// Sampling budget: at most budget events per second reach the log; the rest are dropped.
	budget  int
	second  int64
	taken   int
	dropped atomic.Uint64

	ring  [ringSize][]byte // encoded Entry messages
	head  int
	count int

	history    [historySeconds]int32
	hpos, hlen int
	last       [3]uint64 // previous in, out, delivered
	rates      [3]uint64 // per second, from the last sample
	haveLast   bool

	inflight map[string]*call
	recent   []call // newest last, at most recentCalls
}

func newAppView(budget int) *appView {
	return &appView{budget: budget, inflight: make(map[string]*call)}
}

// admit charges one event against the second's budget; false means drop it (counted).
func (a *appView) admitLocked(now time.Time) bool {
	if s := now.Unix(); s != a.second {
		a.second, a.taken = s, 0
	}
	if a.taken >= a.budget {
		a.dropped.Add(1)
		return false
	}
	a.taken++
	return true
}

func (a *appView) recordLocked(conns int) {
	a.history[a.hpos] = int32(conns)
	a.hpos = (a.hpos + 1) % historySeconds
	a.hlen = min(a.hlen+1, historySeconds)
}

func (a *appView) sample(conns int, in, out, del uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recordLocked(conns)
	cur := [3]uint64{in, out, del}
	if a.haveLast {
		for i := range cur {
			a.rates[i] = 0
			if cur[i] > a.last[i] {
				a.rates[i] = cur[i] - a.last[i]
			}
		}
	}
	a.last, a.haveLast = cur, true
}

// historyLocked returns the chart's samples, oldest first.
func (a *appView) historyLocked() []int32 {
	out := make([]int32, 0, a.hlen)
	start := (a.hpos - a.hlen + historySeconds) % historySeconds
	for i := 0; i < a.hlen; i++ {
		out = append(out, a.history[(start+i)%historySeconds])
	}
	return out
}

func (a *appView) ringLocked() [][]byte {
	out := make([][]byte, 0, a.count)
	start := (a.head - a.count + ringSize) % ringSize
	for i := 0; i < a.count; i++ {
		out = append(out, a.ring[(start+i)%ringSize])
	}
	return out
}

// hiddenData replaces the data of channels whose payload is not the console's to show:
// end-to-end encrypted channels (the server cannot read them anyway, and must not pretend to)
// and Toolmark channels (tool inputs and results).
func hiddenData(channel string) (string, bool) {
	switch {
	case channels.KindOf(channel) == channels.PrivateEncrypted || channels.KindOf(channel) == channels.PrivateEncryptedCache:
		return "(encrypted payload not shown)", true
	case strings.HasPrefix(channel, bridge.ChannelPrefix):
		return "(Toolmark payload not shown)", true
	}
	return "", false
}

// preview is the first dataPreview bytes of data, cut on a rune boundary and copied (data
// may alias a frame buffer).
func preview(data string) string {
	if len(data) <= dataPreview {
		return strings.Clone(data)
	}
	cut := dataPreview
	for cut > 0 && !utf8.RuneStart(data[cut]) {
		cut--
	}
	return strings.Clone(data[:cut]) + "…"
}

// record admits, encodes and fans out one entry built by fill, which runs only when the
// event is within the budget: a dropped event costs a lock and a counter, nothing else.
func (c *Console) record(appID string, fill func(e *Entry)) {
	a := c.apps[appID]
	if a == nil {
		return
	}
	now := c.now()
	a.mu.Lock()
	if !a.admitLocked(now) {
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	e := Entry{T: now.UnixMilli()}
	fill(&e)
	msg := sseMessage("event", e)
	a.mu.Lock()
	a.ring[a.head] = msg
	a.head = (a.head + 1) % ringSize
	a.count = min(a.count+1, ringSize)
	a.mu.Unlock()
	c.broadcast(appID, msg)
}

// broadcast queues msg on every stream of the app without blocking; a full stream counts a drop.
func (c *Console) broadcast(appID string, msg []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.streams {
		if s.app == appID {
			s.offer(msg)
		}
	}
}

// sseMessage encodes one Server-Sent Event.
func sseMessage(event string, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(`{}`)
	}
	out := make([]byte, 0, len(event)+len(b)+16)
	out = append(out, "event: "...)
	out = append(out, event...)
	out = append(out, "\ndata: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// stream is one open browser.
type stream struct {
	app     string
	ch      chan []byte
	dropped atomic.Uint64
}

func (s *stream) offer(msg []byte) {
	select {
	case s.ch <- msg:
	default:
		s.dropped.Add(1)
	}
}

// serverTap, bridgeTap and hookTap are the console as each producer's observer.
type serverTap struct{ c *Console }

func (t serverTap) Connection(appID, socketID string, open bool, reason string, code int) {
	t.c.record(appID, func(e *Entry) {
		e.Kind, e.Socket = kindClosed, socketID
		if open {
			e.Kind = kindOpened
			return
		}
		e.Reason, e.Code = reason, code
	})
}

func (t serverTap) Subscription(appID, socketID, channel string, subscribed bool) {
	t.c.record(appID, func(e *Entry) {
		e.Kind, e.Socket, e.Channel = kindUnsubscribed, socketID, strings.Clone(channel)
		if subscribed {
			e.Kind = kindSubscribed
		}
	})
}

func (t serverTap) Event(appID, kind, channel, event, data, socketID string) {
	t.c.record(appID, func(e *Entry) {
		e.Kind, e.Socket = kind, socketID
		e.Channel, e.Event, e.Size = strings.Clone(channel), strings.Clone(event), len(data)
		if note, hide := hiddenData(channel); hide {
			e.Data = note
		} else {
			e.Data = preview(data)
		}
	})
}

type bridgeTap struct{ c *Console }

func (t bridgeTap) CallStarted(appID, callID, user, conv, tool, kind string, at time.Time) {
	a := t.c.apps[appID]
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.inflight) >= maxInflight {
		a.dropped.Add(1)
		return
	}
	a.inflight[callID] = &call{ID: callID, Tool: tool, Kind: kind, User: user, Conversation: conv, Started: at.UnixMilli(), at: at}
}

func (t bridgeTap) CallEnded(appID, callID, user, conv, tool, kind, status, reason string, latency time.Duration) {
	a := t.c.apps[appID]
	if a == nil {
		return
	}
	now := t.c.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.inflight, callID)
	a.recent = append(a.recent, call{ID: callID, Tool: tool, Kind: kind, User: user, Conversation: conv,
		Status: status, Reason: reason, LatencyMS: latency.Milliseconds(), Started: now.Add(-latency).UnixMilli()})
	if len(a.recent) > recentCalls {
		a.recent = append(a.recent[:0:0], a.recent[len(a.recent)-recentCalls:]...)
	}
}

type hookTap struct{ c *Console }

func (t hookTap) WebhookSent(appID, url string, events, attempts int) {
	t.c.record(appID, func(e *Entry) {
		e.Kind, e.Events = kindWebhookSent, events
		e.Data = url
		if attempts > 1 {
			e.Reason = "after " + itoa(attempts) + " attempts"
		}
	})
}

func (t hookTap) WebhookFailed(appID, url string, events, attempt int, err string) {
	t.c.record(appID, func(e *Entry) {
		e.Kind, e.Events, e.Data = kindWebhookFailed, events, url
		e.Reason = "attempt " + itoa(attempt) + ": " + preview(err)
	})
}

func itoa(n int) string { return strconv.Itoa(n) }
