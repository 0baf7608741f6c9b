package api

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/channels"
)

// infoAttrs parses the info query parameter ("user_count,subscription_count").
func infoAttrs(q url.Values) map[string]bool {
	attrs := map[string]bool{}
	for _, a := range strings.Split(q.Get("info"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			attrs[a] = true
		}
	}
	return attrs
}

// handleChannels serves GET /apps/:app_id/channels: the occupied channels, optionally
// filtered by prefix, with user_count only for presence- prefixes.
func (a *API) handleChannels(c echo.Context) error {
	app := appOf(c)
	q := c.Request().URL.Query()
	prefix := q.Get("filter_by_prefix")
	attrs := infoAttrs(q)
	if attrs["user_count"] && !strings.HasPrefix(prefix, "presence-") {
		return apiError(c, http.StatusBadRequest, "info=user_count needs filter_by_prefix=presence-")
	}
	ctx := c.Request().Context()
	out := map[string]map[string]int{}
	for _, ch := range a.info.ChannelsWithPrefix(ctx, app.ID, prefix) {
		attr := map[string]int{}
		if attrs["user_count"] {
			ms, _ := a.info.Members(ctx, app.ID, ch.Name)
			attr["user_count"] = len(ms)
		}
		if attrs["subscription_count"] {
			attr["subscription_count"] = ch.SubscriptionCount
		}
		out[ch.Name] = attr
	}
	return c.JSON(http.StatusOK, map[string]any{"channels": out})
}

// channelParam is the :channel path parameter, unescaped and validated.
func channelParam(c echo.Context) (string, bool) {
	name, err := url.PathUnescape(c.Param("channel"))
	return name, err == nil && channels.ValidName(name)
}

// handleChannel serves GET /apps/:app_id/channels/:channel.
func (a *API) handleChannel(c echo.Context) error {
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
	count, _ := a.info.SubscriptionCount(c.Request().Context(), app.ID, name)
	out := map[string]any{"occupied": count > 0}
	if attrs["subscription_count"] {
		out["subscription_count"] = count
	}
	if attrs["user_count"] {
		ms, _ := a.info.Members(c.Request().Context(), app.ID, name)
		out["user_count"] = len(ms)
	}
	return c.JSON(http.StatusOK, out)
}

// handleUsers serves GET /apps/:app_id/channels/:channel/users (presence channels only).
func (a *API) handleUsers(c echo.Context) error {
	app := appOf(c)
	name, ok := channelParam(c)
	if !ok {
		return apiError(c, http.StatusBadRequest, "Invalid channel name")
	}
	if !channels.KindOf(name).IsPresence() {
		return apiError(c, http.StatusBadRequest, "users are only available for presence channels")
	}
	ms, err := a.info.Members(c.Request().Context(), app.ID, name)
	if err != nil {
		return apiError(c, http.StatusServiceUnavailable, "Presence is unavailable")
	}
	users := make([]map[string]string, len(ms))
	for i, m := range ms {
		users[i] = map[string]string{"id": m.UserID}
	}
	return c.JSON(http.StatusOK, map[string]any{"users": users})
}

// handleTerminate serves POST /apps/:app_id/users/:user_id/terminate_connections: every
// node closes its sockets of the user (4009).
func (a *API) handleTerminate(c echo.Context) error {
	app := appOf(c)
	user, err := url.PathUnescape(c.Param("user_id"))
	if err != nil || user == "" {
		return apiError(c, http.StatusBadRequest, "Invalid user id")
	}
	if err := a.term.TerminateUser(c.Request().Context(), app.ID, user); err != nil {
		return apiError(c, http.StatusServiceUnavailable, "Could not reach every node: "+err.Error())
	}
	return c.JSON(http.StatusOK, struct{}{})
}
