package console

import (
	"bytes"
	"context"
	"net/http"
	"sort"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/channels"
)

// snapshotTimeout bounds the cluster reads of one snapshot.
const snapshotTimeout = 2 * time.Second

// handleStream is GET {path}/console/api/stream?app=ID: Server-Sent Events for one app. It
// sends hello, the recent events and the chart history at once, then each event as it is
// admitted and, once a second, the stats and (when they changed) the channels and Toolmark
// snapshots. The browser never polls.
func (c *Console) handleStream(ctx echo.Context) error {
	appID := ctx.QueryParam("app")
	a := c.apps[appID]
	if a == nil {
		return ctx.JSON(http.StatusNotFound, map[string]string{"error": "Unknown app"})
	}
	s := &stream{app: appID, ch: make(chan []byte, streamQueue)}
	c.mu.Lock()
	if len(c.streams) >= maxStreams {
		c.mu.Unlock()
		return ctx.JSON(http.StatusTooManyRequests, map[string]string{"error": "Too many consoles open"})
	}
	c.streams[s] = struct{}{}
	c.attachLocked()
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.streams, s)
		if len(c.streams) == 0 {
			c.detachLocked()
		}
		c.mu.Unlock()
	}()

	w := ctx.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	a.mu.Lock()
	backlog := a.ringLocked()
	history := a.historyLocked()
	a.mu.Unlock()
	var buf bytes.Buffer
	buf.Write(sseMessage("hello", map[string]any{"app": appID, "node": c.opts.Node, "clustered": c.opts.Server.Clustered(), "history": history}))
	for _, m := range backlog {
		buf.Write(m)
	}
	if _, err := w.Write(buf.Bytes()); err != nil {
		return nil
	}
	w.Flush()

	var lastChannels, lastToolmark []byte
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	reqCtx := ctx.Request().Context()
	send := func(msgs ...[]byte) bool {
		for _, m := range msgs {
			if _, err := w.Write(m); err != nil {
				return false
			}
		}
		w.Flush()
		return true
	}
	snapshot := func() bool {
		sctx, cancel := context.WithTimeout(reqCtx, snapshotTimeout)
		defer cancel()
		list := c.opts.Server.ChannelList(sctx, appID)
		out := [][]byte{c.statsMessage(sctx, appID, s)}
		if m := c.channelsMessage(sctx, appID, list); !bytes.Equal(m, lastChannels) {
			lastChannels = m
			out = append(out, m)
		}
		if m := c.toolmarkMessage(sctx, appID, list); !bytes.Equal(m, lastToolmark) {
			lastToolmark = m
			out = append(out, m)
		}
		return send(out...)
	}
	if !snapshot() {
		return nil
	}
	for {
		select {
		case <-reqCtx.Done():
			return nil
		case <-c.stop:
			return nil
		case m := <-s.ch:
			// Take what else is waiting too: one write per burst.
			buf.Reset()
			buf.Write(m)
			for more := true; more && buf.Len() < 64<<10; {
				select {
				case m := <-s.ch:
					buf.Write(m)
				default:
					more = false
				}
			}
			if !send(buf.Bytes()) {
				return nil
			}
		case <-tick.C:
			if !snapshot() {
				return nil
			}
		}
	}
}

func (c *Console) statsMessage(ctx context.Context, appID string, s *stream) []byte {
	a := c.apps[appID]
	a.mu.Lock()
	rates := a.rates
	a.mu.Unlock()
	st := map[string]any{
		"t":           c.now().UnixMilli(),
		"connections": c.opts.Server.ConnectionCount(appID),
		"in":          rates[0],
		"out":         rates[1],
		"deliveries":  rates[2],
		"dropped":     a.dropped.Load() + s.dropped.Load(),
	}
	if c.opts.Webhooks != nil {
		ws := c.opts.Webhooks.Stats()
		st["webhooks"] = map[string]any{"queued": ws.Pending, "failed": ws.Failed, "sent": ws.Sent, "dropped": ws.Dropped}
	}
	if c.opts.Server.Clustered() {
		redis := "ok"
		if problems := c.opts.Server.Health(ctx); len(problems) > 0 {
			redis = problems["redis"]
			if redis == "" {
				redis = "degraded"
			}
		}
		st["redis"] = redis
	}
	return sseMessage("stats", st)
}

type memberView struct {
	ID   string `json:"id"`
	Info string `json:"info,omitempty"`
}

type channelView struct {
	Name          string       `json:"name"`
	Type          string       `json:"type"`
	Subscriptions int          `json:"subscriptions"`
	Members       []memberView `json:"members,omitempty"`
	MemberCount   int          `json:"member_count,omitempty"`
}

var kindNames = map[channels.Kind]string{
	channels.Public: "public", channels.Private: "private", channels.Presence: "presence",
	channels.PrivateEncrypted: "private-encrypted", channels.PrivateEncryptedCache: "private-encrypted-cache",
	channels.Cache: "cache", channels.PrivateCache: "private-cache", channels.PresenceCache: "presence-cache",
	channels.ServerToUser: "server-to-user",
}

func (c *Console) channelsMessage(ctx context.Context, appID string, list []channels.ChannelInfo) []byte {
	truncated := len(list) > maxChannels
	if truncated {
		list = list[:maxChannels]
	}
	views := make([]channelView, 0, len(list))
	lookups := 0
	for _, ch := range list {
		kind := channels.KindOf(ch.Name)
		v := channelView{Name: ch.Name, Type: kindNames[kind], Subscriptions: ch.SubscriptionCount}
		if kind.IsPresence() && lookups < maxPresenceLookups {
			lookups++
			if ms, err := c.opts.Server.Members(ctx, appID, ch.Name); err == nil {
				sort.Slice(ms, func(i, j int) bool { return ms[i].UserID < ms[j].UserID })
				v.MemberCount = len(ms)
				for i, m := range ms {
					if i == maxMembersShown {
						break
					}
					v.Members = append(v.Members, memberView{ID: m.UserID, Info: preview(string(m.Info))})
				}
			}
		}
		views = append(views, v)
	}
	return sseMessage("channels", map[string]any{"channels": views, "truncated": truncated})
}

type toolView struct {
	Name  string       `json:"name"`
	Hints bridge.Hints `json:"hints"`
}

type conversationView struct {
	User         string     `json:"user"`
	Conversation string     `json:"conversation"`
	Channel      string     `json:"channel"`
	ClientID     string     `json:"client_id,omitempty"`
	Rev          int64      `json:"rev,omitempty"`
	Tools        []toolView `json:"tools"`
}

// toolmarkMessage lists the conversations with a page connected (an occupied Toolmark channel,
// cluster-wide when scaled) and their manifests, then the calls this node saw.
func (c *Console) toolmarkMessage(ctx context.Context, appID string, list []channels.ChannelInfo) []byte {
	convs := []conversationView{}
	for _, ch := range list {
		user, conv, ok := bridge.ParseChannel(ch.Name)
		if !ok || len(convs) >= maxConversations {
			continue
		}
		v := conversationView{User: user, Conversation: conv, Channel: ch.Name, Tools: []toolView{}}
		if c.opts.Bridge != nil {
			if m, err := c.opts.Bridge.Manifest(ctx, appID, user, conv); err == nil && m != nil {
				v.ClientID, v.Rev = m.ClientID, m.Rev
				for _, t := range m.Tools {
					v.Tools = append(v.Tools, toolView{Name: t.Name, Hints: t.Hints})
				}
			}
		}
		convs = append(convs, v)
	}
	a := c.apps[appID]
	now := c.now()
	a.mu.Lock()
	inflight := make([]call, 0, len(a.inflight))
	for _, cl := range a.inflight {
		v := *cl
		v.AgeMS = now.Sub(cl.at).Milliseconds() / 1000 * 1000 // whole seconds: unchanged snapshots stay unsent
		inflight = append(inflight, v)
	}
	recent := make([]call, len(a.recent))
	for i := range a.recent {
		recent[len(a.recent)-1-i] = a.recent[i] // newest first
	}
	a.mu.Unlock()
	sort.Slice(inflight, func(i, j int) bool { return inflight[i].Started < inflight[j].Started })
	return sseMessage("toolmark", map[string]any{"conversations": convs, "inflight": inflight, "recent": recent})
}
