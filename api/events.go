package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/pusher"
)

// handleEvents serves POST /apps/:app_id/events: one event to up to 100 channels, encoded
// once per channel and published all or nothing.
func (a *API) handleEvents(c echo.Context) error {
	app := appOf(c)
	ev, herr := decodeEvent(bodyOf(c))
	if herr != nil {
		return apiError(c, herr.status, herr.message)
	}
	chans, data, herr := prepare(app, ev)
	if herr != nil {
		return apiError(c, herr.status, herr.message)
	}
	ctx := c.Request().Context()
	ms := make([]channels.Message, len(chans))
	for i, ch := range chans {
		ms[i] = a.pub.EventMessage(app.ID, ch, ev.Name, data, ev.SocketID)
	}
	if err := a.pub.PublishAll(ctx, ms); err != nil {
		return publishRefused(c, err)
	}
	for _, ch := range chans {
		a.pub.ObserveTrigger(app.ID, pusher.ObservedAPI, ch, ev.Name, data, ev.SocketID)
	}
	if ev.Info == "" {
		return c.JSON(http.StatusOK, struct{}{})
	}
	info := make(map[string]map[string]int, len(chans))
	for _, ch := range chans {
		info[ch] = a.channelAttributes(ctx, app, ch, ev.Info)
	}
	return c.JSON(http.StatusOK, map[string]any{"channels": info})
}

// handleBatch serves POST /apps/:app_id/batch_events: up to max_batch_size events of one
// channel each, every one validated before any is published.
func (a *API) handleBatch(c echo.Context) error {
	app := appOf(c)
	var req struct{ Batch []*triggerEvent }
	var herr *httpError
	if req.Batch, herr = decodeBatch(bodyOf(c)); herr != nil {
		return apiError(c, herr.status, herr.message)
	}
	if len(req.Batch) == 0 {
		return apiError(c, http.StatusBadRequest, "batch is empty")
	}
	if len(req.Batch) > app.MaxBatchSize {
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
		chans, data, herr := prepare(app, ev)
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
		ms[i] = a.pub.EventMessage(app.ID, p.chans[0], ev.Name, p.data, ev.SocketID)
	}
	if err := a.pub.PublishAll(ctx, ms); err != nil {
		return publishRefused(c, err)
	}
	for i, p := range ready {
		ev := req.Batch[i]
		a.pub.ObserveTrigger(app.ID, pusher.ObservedAPI, p.chans[0], ev.Name, p.data, ev.SocketID)
	}
	if !withInfo {
		return c.JSON(http.StatusOK, map[string]any{"batch": struct{}{}})
	}
	out := make([]map[string]int, len(ready))
	for i, p := range ready {
		out[i] = a.channelAttributes(ctx, app, p.chans[0], req.Batch[i].Info)
	}
	return c.JSON(http.StatusOK, map[string]any{"batch": out})
}

// channelAttributes answers info=user_count,subscription_count for one channel.
func (a *API) channelAttributes(ctx context.Context, app *config.App, ch, info string) map[string]int {
	out := map[string]int{}
	for _, attr := range strings.Split(info, ",") {
		switch strings.TrimSpace(attr) {
		case "user_count":
			if channels.KindOf(ch).IsPresence() {
				ms, _ := a.info.Members(ctx, app.ID, ch)
				out["user_count"] = len(ms)
			}
		case "subscription_count":
			out["subscription_count"], _ = a.info.SubscriptionCount(ctx, app.ID, ch)
		}
	}
	return out
}
