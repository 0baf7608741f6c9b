package pusher

import (
	"github.com/reverbgo/reverbgo/ws"

	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reverbgo/reverbgo/channels"
)

// closeReasonCount sizes the per-reason counter arrays.
const closeReasonCount = len(closeInfos)

// appStats are an app's cumulative counters. Call sites add to them with one atomic add and
// no label lookup; the collector turns them into Prometheus samples at scrape time, so the
// message path never touches a metric vector.
type appStats struct {
	opened         atomic.Uint64
	closed         [closeReasonCount]atomic.Uint64
	refused        [closeReasonCount]atomic.Uint64
	clientMessages atomic.Uint64
	published      atomic.Uint64
	rateLimited    atomic.Uint64
	// messagesLimited counts messages refused by Reverb's rate_limiting (ratelimit.go).
	messagesLimited atomic.Uint64
}

// serverStats are the counters that belong to no configured app.
type serverStats struct {
	unknownRefused [closeReasonCount]atomic.Uint64 // connections to an app key not in the config
	httpOnce       sync.Once
	http           *prometheus.CounterVec // HTTP requests by endpoint and code (not the WS hot path)
}

// countRefused records a connection refused before it was admitted (app == nil: unknown key).
func (s *Server) countRefused(app *appState, reason CloseReason) {
	if app == nil {
		s.stats.unknownRefused[reason].Add(1)
		return
	}
	app.stats.refused[reason].Add(1)
}

// countPublished records one event published to one channel by the HTTP API or the bridge;
// the server's own pusher_internal: events are not counted.
func (s *Server) countPublished(appID, event string) {
	if strings.HasPrefix(event, "pusher_internal:") {
		return
	}
	if a := s.appByID(appID); a != nil {
		a.stats.published.Add(1)
	}
}

// endReasons are the reasons an admitted connection can end with: every reason but none and
// the connect-time-only refusals, so a reason added to errors.go is exported without an edit here.
var endReasons = func() []CloseReason {
	var out []CloseReason
	for r := CloseClientGone; int(r) < closeReasonCount; r++ {
		switch r {
		case CloseAppNotFound, CloseAppDisabled, CloseOverQuota, CloseOriginNotAllowed, CloseUnsupportedProtocol, CloseOverCapacity:
		default:
			out = append(out, r)
		}
	}
	return out
}()

// refusalReasons are the reasons admit can refuse a connection with.
var refusalReasons = []CloseReason{CloseAppDisabled, CloseOverQuota, CloseOriginNotAllowed, CloseUnsupportedProtocol, CloseServerShutdown, CloseOverCapacity}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descConnections    = desc("reverbgo_connections", "Open WebSocket connections on this node.", "app")
	descOpened         = desc("reverbgo_connections_opened_total", "WebSocket connections admitted on this node.", "app")
	descClosed         = desc("reverbgo_connections_closed_total", "Admitted WebSocket connections that ended, by close reason.", "app", "reason")
	descRefused        = desc("reverbgo_connections_refused_total", "WebSocket connections refused at connect time, by close reason (app is empty for an unknown app key).", "app", "reason")
	descSlow           = desc("reverbgo_slow_consumer_disconnects_total", "Connections cut off because their outbound queue passed the limit (close code 4100).", "app")
	descClientMessages = desc("reverbgo_client_messages_received_total", "Frames received from WebSocket clients (pings, subscribes, client events, ...).", "app")
	descRateLimited    = desc("reverbgo_rate_limit_refusals_total", "Requests refused by a rate limit, by limit.", "app", "limit")
	descPublished      = desc("reverbgo_messages_published_total", "Events published, one per channel: HTTP API triggers and batches, client events and bridge publishes.", "app")
	descDeliveries     = desc("reverbgo_deliveries_total", "Broadcast frames queued on this node's sockets (one per subscriber reached).")
	descDeliveryBytes  = desc("reverbgo_delivery_bytes_total", "Bytes of the broadcast frames queued on this node's sockets.")
	descChannels       = desc("reverbgo_channels", "Occupied channels on this node, by channel type.", "app", "type")
	descSubscriptions  = desc("reverbgo_subscriptions", "Channel subscriptions on this node, by channel type.", "app", "type")
	descPresence       = desc("reverbgo_presence_members", "Distinct (channel, user) presence memberships held by this node's sockets.", "app")
	descSocketWrites   = desc("reverbgo_socket_writes_total", "Writes to WebSocket sockets: path=writev counts the flushers' non-blocking writev syscalls, path=io_uring their socket writes through io_uring (one SQE each, server.io_uring), path=blocking the batches of the blocking writer (TLS, full sockets).", "path")
	descURingEnters    = desc("reverbgo_io_uring_enters_total", "io_uring_enter syscalls of the flushers (server.io_uring): each submits a round's io_uring socket writes and reaps them. The flushers' write syscalls are these plus reverbgo_socket_writes_total{path=\"writev\"}.")
	descFramesWritten  = desc("reverbgo_frames_written_total", "Frames handed to socket writes; divided by reverbgo_socket_writes_total, the frames per write.")
	descWritePath      = desc("reverbgo_write_path", "The flushers' write path: 1 for the one in use (io_uring once the start-up probe passed, writev otherwise or after io_uring was refused at run time), 0 for the other.", "path")
	descFlushRounds    = desc("reverbgo_flusher_rounds_total", "Flusher rounds (each writes every socket with frames queued); coalesced=true counts the rounds that waited for server.write_coalesce_ms.", "coalesced")
)

// Collector exposes the server's counters and gauges to a Prometheus registry.
func (s *Server) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Server }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnections, descOpened, descClosed, descRefused, descSlow,
		descClientMessages, descRateLimited, descPublished, descDeliveries, descDeliveryBytes,
		descChannels, descSubscriptions, descPresence, descSocketWrites, descURingEnters, descFramesWritten, descFlushRounds, descWritePath} {
		ch <- d
	}
	c.s.httpVec().Describe(ch)
}

func counter(d *prometheus.Desc, v uint64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
}

func gauge(d *prometheus.Desc, v int, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	census := s.reg.Census()
	presence := s.presenceMembers()
	for _, a := range s.appList() {
		id := a.cfg().ID
		st := &a.stats
		ch <- gauge(descConnections, int(a.conns.Load()), id)
		ch <- counter(descOpened, st.opened.Load(), id)
		for _, r := range endReasons {
			ch <- counter(descClosed, st.closed[r].Load(), id, r.String())
		}
		for _, r := range refusalReasons {
			ch <- counter(descRefused, st.refused[r].Load(), id, r.String())
		}
		ch <- counter(descSlow, st.closed[CloseSlowConsumer].Load(), id)
		ch <- counter(descClientMessages, st.clientMessages.Load(), id)
		ch <- counter(descRateLimited, st.rateLimited.Load(), id, "client_events")
		ch <- counter(descRateLimited, st.messagesLimited.Load(), id, "messages")
		ch <- counter(descPublished, st.published.Load(), id)
		kc := census[id]
		if kc == nil {
			kc = &channels.KindCounts{}
		}
		for k := 0; k < channels.KindCount; k++ {
			ch <- gauge(descChannels, kc.Channels[k], id, channels.Kind(k).String())
			ch <- gauge(descSubscriptions, kc.Subscriptions[k], id, channels.Kind(k).String())
		}
		ch <- gauge(descPresence, presence[id], id)
	}
	ch <- counter(descRefused, s.stats.unknownRefused[CloseAppNotFound].Load(), "", CloseAppNotFound.String())
	frames, bytes := s.reg.Deliveries()
	ch <- counter(descDeliveries, frames)
	ch <- counter(descDeliveryBytes, bytes)
	w := s.writeCounts()
	ch <- counter(descSocketWrites, w.Writev, "writev")
	ch <- counter(descSocketWrites, w.URing, "io_uring")
	ch <- counter(descSocketWrites, w.Blocking, "blocking")
	ch <- counter(descURingEnters, w.URingEnters)
	ch <- counter(descFramesWritten, w.Frames)
	ch <- counter(descFlushRounds, w.Rounds, "false")
	ch <- counter(descFlushRounds, w.Coalesced, "true")
	path := s.transport.WritePath()
	for _, p := range []string{ws.PathIOUring, ws.PathWritev} {
		ch <- gauge(descWritePath, boolInt(p == path), p)
	}
	s.httpVec().Collect(ch)
}

// writeCounts are the transport's write-path counters (see ws.WriteCounts).
func (s *Server) writeCounts() ws.WriteCounts { return s.transport.WriteCounts() }

// presenceMembers counts, per app, the distinct (channel, user) pairs of this node's
// presence subscriptions. It walks the socket table: scrape-time cost only.
func (s *Server) presenceMembers() map[string]int {
	type member struct{ app, channel, user string }
	seen := make(map[member]struct{})
	out := make(map[string]int)
	s.sockets.each(func(c *Conn) {
		c.subsMu.RLock()
		for name, sub := range c.subs.all() {
			if sub.userID == "" {
				continue
			}
			m := member{c.app.cfg().ID, name, sub.userID}
			if _, dup := seen[m]; !dup {
				seen[m] = struct{}{}
				out[m.app]++
			}
		}
		c.subsMu.RUnlock()
	})
	return out
}

func (s *Server) httpVec() *prometheus.CounterVec {
	s.stats.httpOnce.Do(func() {
		s.stats.http = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reverbgo_http_requests_total",
			Help: "HTTP requests (Pusher HTTP API, /up, Toolmark, /metrics) by app, route and status code; WebSocket upgrades are counted as connections.",
		}, []string{"app", "endpoint", "code"})
	})
	return s.stats.http
}

// HTTPMetrics counts every HTTP request by route pattern (prefix stripped, "other" for
// unknown routes, so the label set stays bounded), app (only ids from the config) and
// status code. WebSocket upgrades are skipped: they are counted as connections.
func (s *Server) HTTPMetrics(prefix string) echo.MiddlewareFunc {
	vec := s.httpVec()
	var once sync.Once
	var routes map[string]bool
	wsRoute := prefix + "/app/:key"
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			path := c.Path()
			if path == wsRoute {
				return err
			}
			once.Do(func() {
				routes = make(map[string]bool)
				for _, r := range c.Echo().Routes() {
					routes[r.Path] = true
				}
			})
			endpoint := "other"
			if routes[path] {
				endpoint = strings.TrimPrefix(path, prefix)
			}
			app := c.Param("app_id")
			if app == "" {
				app = c.Param("app")
			}
			if s.appByID(app) == nil {
				app = ""
			}
			code := c.Response().Status
			if err != nil && !c.Response().Committed {
				var he *echo.HTTPError
				if errors.As(err, &he) {
					code = he.Code
				} else {
					code = http.StatusInternalServerError
				}
			}
			vec.WithLabelValues(app, endpoint, strconv.Itoa(code)).Inc()
			return err
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
