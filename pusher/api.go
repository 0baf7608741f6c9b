package pusher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/apisign"
	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
)

// Pusher HTTP API limits.
const (
	maxTriggerChannels = 100
	maxEventNameLength = 200
)

var socketIDPattern = regexp.MustCompile(`^\d+\.\d+$`)

// Routes mounts the WebSocket endpoint, the Pusher HTTP API and /up under prefix.
func (s *Server) Routes(e *echo.Echo, prefix string) {
	e.GET(prefix+"/app/:key", func(c echo.Context) error {
		s.ServeWS(c.Response(), c.Request(), c.Param("key"))
		return nil
	})
	e.GET(prefix+"/up", s.handleUp)
	signed := s.signedRequest(prefix)
	e.POST(prefix+"/apps/:app_id/events", s.handleEvents, signed)
	e.POST(prefix+"/apps/:app_id/batch_events", s.handleBatch, signed)
	e.GET(prefix+"/apps/:app_id/channels", s.handleChannels, signed)
	e.GET(prefix+"/apps/:app_id/channels/:channel", s.handleChannel, signed)
	e.GET(prefix+"/apps/:app_id/channels/:channel/users", s.handleUsers, signed)
	e.POST(prefix+"/apps/:app_id/users/:user_id/terminate_connections", s.handleTerminate, signed)
	e.GET(prefix+"/apps/:app_id/connections", s.handleConnections, signed)
}

// healthTimeout bounds the dependency checks of /up, so a load balancer's probe gets an
// answer (DEGRADED) before its own timeout while Redis hangs.
const healthTimeout = time.Second

// handleUp answers {"health":"OK"} or, when a dependency is unreachable, 503 with
// {"health":"DEGRADED"} plus what is down. A degraded node still serves its own sockets.
func (s *Server) handleUp(c echo.Context) error {
	if s.health != nil {
		ctx, cancel := context.WithTimeout(c.Request().Context(), healthTimeout)
		problems := s.health(ctx)
		cancel()
		if len(problems) > 0 {
			out := map[string]string{"health": "DEGRADED"}
			for k, v := range problems {
				out[k] = v
			}
			return c.JSON(http.StatusServiceUnavailable, out)
		}
	}
	return c.JSON(http.StatusOK, map[string]string{"health": "OK"})
}

// apiError answers with a real HTTP status and {"error": message}.
func apiError(c echo.Context, status int, message string) error {
	return c.JSON(status, map[string]string{"error": message})
}

// signedRequest is the shared signing middleware (apisign) for the Pusher HTTP API: the
// body is bounded by server.max_request_size and the path is verified without prefix.
func (s *Server) signedRequest(prefix string) echo.MiddlewareFunc {
	limit := s.cfg.Server.MaxRequestSize
	if limit <= 0 { // a Config built by hand rather than loaded: the documented default
		limit = config.DefaultMaxRequestSize
	}
	return apisign.Middleware(apisign.Config{
		Prefix: prefix,
		Param:  "app_id",
		Lookup: func(id string) (any, apisign.Credentials, bool) {
			app := s.appsByID[id]
			if app == nil {
				return nil, apisign.Credentials{}, false
			}
			return app, apisign.Credentials{Key: app.cfg.Key, Secret: app.cfg.Secret}, true
		},
		MaxBody: limit,
		Now:     s.now,
	})
}

func appOf(c echo.Context) *appState { return apisign.App(c).(*appState) }
func bodyOf(c echo.Context) []byte   { return apisign.Body(c) }

// triggerEvent is one event of POST /events or of a batch.
// decodeEvent and decodeBatch fill it after checking each field's JSON type.
type triggerEvent struct {
	Name     string
	Data     string
	HasData  bool // data was present (an empty string is valid data)
	Channels []string
	Channel  string
	SocketID string
	Info     string
}

type httpError struct {
	status  int
	message string
}

func (e *httpError) Error() string { return e.message }

// prepare validates an event and returns its target channels and its data string.
func (s *Server) prepare(app *appState, ev *triggerEvent) ([]string, string, *httpError) {
	if ev.Name == "" || len(ev.Name) > maxEventNameLength {
		return nil, "", &httpError{http.StatusBadRequest, "name is required (at most 200 characters)"}
	}
	chans := ev.Channels
	if ev.Channel != "" {
		chans = append(chans, ev.Channel)
	}
	if len(chans) == 0 {
		return nil, "", &httpError{http.StatusBadRequest, "channels or channel is required"}
	}
	if len(chans) > maxTriggerChannels {
		return nil, "", &httpError{http.StatusBadRequest, "at most 100 channels per event"}
	}
	for _, ch := range chans {
		if !channels.ValidName(ch) {
			return nil, "", &httpError{http.StatusBadRequest, "invalid channel name: " + truncate(ch, 200)}
		}
	}
	if !ev.HasData {
		return nil, "", &httpError{http.StatusBadRequest, "data is required"}
	}
	data := ev.Data
	if len(data) > app.cfg.MaxMessageSize {
		return nil, "", &httpError{http.StatusRequestEntityTooLarge, "event data is over the app's max_message_size"}
	}
	return chans, data, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func decodeJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func (s *Server) handleEvents(c echo.Context) error {
	app := appOf(c)
	ev, herr := decodeEvent(bodyOf(c))
	if herr != nil {
		return apiError(c, herr.status, herr.message)
	}
	chans, data, herr := s.prepare(app, ev)
	if herr != nil {
		return apiError(c, herr.status, herr.message)
	}
	ctx := c.Request().Context()
	ms := make([]channels.Message, len(chans))
	for i, ch := range chans {
		ms[i] = s.eventMessage(app.cfg.ID, ch, ev.Name, data, ev.SocketID)
	}
	if err := s.publishAll(ctx, ms); err != nil {
		return apiError(c, http.StatusServiceUnavailable, "Could not publish: "+err.Error())
	}
	for _, ch := range chans {
		s.observeTrigger(app.cfg.ID, ObservedAPI, ch, ev.Name, data, ev.SocketID)
	}
	if ev.Info == "" {
		return c.JSON(http.StatusOK, struct{}{})
	}
	info := make(map[string]map[string]int, len(chans))
	for _, ch := range chans {
		info[ch] = s.channelAttributes(ctx, app, ch, ev.Info)
	}
	return c.JSON(http.StatusOK, map[string]any{"channels": info})
}

func (s *Server) handleBatch(c echo.Context) error {
	app := appOf(c)
	var req struct{ Batch []*triggerEvent }
	var herr *httpError
	if req.Batch, herr = decodeBatch(bodyOf(c)); herr != nil {
		return apiError(c, herr.status, herr.message)
	}
	if len(req.Batch) == 0 {
		return apiError(c, http.StatusBadRequest, "batch is empty")
	}
	if len(req.Batch) > app.cfg.MaxBatchSize {
		return apiError(c, http.StatusBadRequest, "batch is over max_batch_size")
	}
	type prepared struct {
		chans []string
		data  string
	}
	ready := make([]prepared, len(req.Batch))
	for i := range req.Batch {
		ev := req.Batch[i]
		if len(ev.Channels) > 0 {
			return apiError(c, http.StatusBadRequest, fmt.Sprintf("batch[%d]: batch events take one channel each", i))
		}
		chans, data, herr := s.prepare(app, ev)
		if herr != nil {
			return apiError(c, herr.status, fmt.Sprintf("batch[%d]: %s", i, herr.message))
		}
		ready[i] = prepared{chans, data}
	}
	ctx := c.Request().Context()
	withInfo := false
	ms := make([]channels.Message, len(ready))
	for i, p := range ready {
		ev := req.Batch[i]
		withInfo = withInfo || ev.Info != ""
		ms[i] = s.eventMessage(app.cfg.ID, p.chans[0], ev.Name, p.data, ev.SocketID)
	}
	if err := s.publishAll(ctx, ms); err != nil {
		return apiError(c, http.StatusServiceUnavailable, "Could not publish: "+err.Error())
	}
	for i, p := range ready {
		ev := req.Batch[i]
		s.observeTrigger(app.cfg.ID, ObservedAPI, p.chans[0], ev.Name, p.data, ev.SocketID)
	}
	if !withInfo {
		return c.JSON(http.StatusOK, map[string]any{"batch": struct{}{}})
	}
	out := make([]map[string]int, len(ready))
	for i, p := range ready {
		out[i] = s.channelAttributes(ctx, app, p.chans[0], req.Batch[i].Info)
	}
	return c.JSON(http.StatusOK, map[string]any{"batch": out})
}

// channelAttributes answers info=user_count,subscription_count for one channel.
func (s *Server) channelAttributes(ctx context.Context, app *appState, ch, info string) map[string]int {
	out := map[string]int{}
	for _, attr := range strings.Split(info, ",") {
		switch strings.TrimSpace(attr) {
		case "user_count":
			if channels.KindOf(ch).IsPresence() {
				ms, _ := s.reg.Presence().Members(ctx, app.cfg.ID, ch)
				out["user_count"] = len(ms)
			}
		case "subscription_count":
			out["subscription_count"] = s.subscriptionCount(ctx, app.cfg.ID, ch)
		}
	}
	return out
}

func infoAttrs(q url.Values) map[string]bool {
	attrs := map[string]bool{}
	for _, a := range strings.Split(q.Get("info"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			attrs[a] = true
		}
	}
	return attrs
}

func (s *Server) handleChannels(c echo.Context) error {
	app := appOf(c)
	q := c.Request().URL.Query()
	prefix := q.Get("filter_by_prefix")
	attrs := infoAttrs(q)
	if attrs["user_count"] && !strings.HasPrefix(prefix, "presence-") {
		return apiError(c, http.StatusBadRequest, "info=user_count needs filter_by_prefix=presence-")
	}
	ctx := c.Request().Context()
	out := map[string]map[string]int{}
	for _, ch := range s.channelList(ctx, app.cfg.ID, prefix) {
		attr := map[string]int{}
		if attrs["user_count"] {
			ms, _ := s.reg.Presence().Members(ctx, app.cfg.ID, ch.Name)
			attr["user_count"] = len(ms)
		}
		if attrs["subscription_count"] {
			attr["subscription_count"] = ch.SubscriptionCount
		}
		out[ch.Name] = attr
	}
	return c.JSON(http.StatusOK, map[string]any{"channels": out})
}

func channelParam(c echo.Context) (string, bool) {
	name, err := url.PathUnescape(c.Param("channel"))
	return name, err == nil && channels.ValidName(name)
}

func (s *Server) handleChannel(c echo.Context) error {
	app := appOf(c)
	name, ok := channelParam(c)
	if !ok {
		return apiError(c, http.StatusBadRequest, "Invalid channel name")
	}
	attrs := infoAttrs(c.Request().URL.Query())
	presence := channels.KindOf(name).IsPresence()
	if attrs["user_count"] && !presence {
		return apiError(c, http.StatusBadRequest, "user_count is only available for presence channels")
	}
	count := s.subscriptionCount(c.Request().Context(), app.cfg.ID, name)
	out := map[string]any{"occupied": count > 0}
	if attrs["subscription_count"] {
		out["subscription_count"] = count
	}
	if attrs["user_count"] {
		ms, _ := s.reg.Presence().Members(c.Request().Context(), app.cfg.ID, name)
		out["user_count"] = len(ms)
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) handleUsers(c echo.Context) error {
	app := appOf(c)
	name, ok := channelParam(c)
	if !ok {
		return apiError(c, http.StatusBadRequest, "Invalid channel name")
	}
	if !channels.KindOf(name).IsPresence() {
		return apiError(c, http.StatusBadRequest, "users are only available for presence channels")
	}
	ms, err := s.reg.Presence().Members(c.Request().Context(), app.cfg.ID, name)
	if err != nil {
		return apiError(c, http.StatusServiceUnavailable, "Presence is unavailable")
	}
	users := make([]map[string]string, len(ms))
	for i, m := range ms {
		users[i] = map[string]string{"id": m.UserID}
	}
	return c.JSON(http.StatusOK, map[string]any{"users": users})
}

func (s *Server) handleTerminate(c echo.Context) error {
	app := appOf(c)
	user, err := url.PathUnescape(c.Param("user_id"))
	if err != nil || user == "" {
		return apiError(c, http.StatusBadRequest, "Invalid user id")
	}
	// Every node closes its own sockets of the user: the request goes through the broker.
	msg := channels.Message{AppID: app.cfg.ID, Channel: channels.TerminateChannel, Frame: []byte(user)}
	if err := s.reg.Publish(c.Request().Context(), msg); err != nil {
		return apiError(c, http.StatusServiceUnavailable, "Could not reach every node: "+err.Error())
	}
	return c.JSON(http.StatusOK, struct{}{})
}

// terminator is each app's subscriber to channels.TerminateChannel on this node.
type terminator struct {
	s     *Server
	appID string
}

func (t terminator) SocketID() string { return "\x00terminator" }

// Send closes the named user's sockets on this node; closeWith never blocks.
func (t terminator) Send(frame []byte) {
	for _, conn := range t.s.sockets.userConns(t.appID, string(frame)) {
		conn.closeWith(CloseTerminated)
	}
}

func (s *Server) handleConnections(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]int{"connections": s.clusterConnections(c.Request().Context(), appOf(c).cfg.ID)})
}
