package api

import (
	"context"
	"net/http"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/pusher"
)

// Trigger publishes one event exactly as a signed POST /apps/{id}/events would (same
// validation, the same all-or-nothing publish), on behalf of the debug console: it is reported to the
// observer as pusher.ObservedConsole. data is the body's "data" value: a JSON string, as
// every SDK sends. A refusal is a *pusher.TriggerError carrying the status POST /events
// would answer.
func (a *API) Trigger(ctx context.Context, appID, channel, event string, data []byte) error {
	app := a.app(appID)
	if app == nil {
		return &pusher.TriggerError{Status: http.StatusNotFound, Message: "Unknown app"}
	}
	// The same typed decoding of data as a POST body's (a JSON string); name and channel
	// are strings already, checked by prepare as POST /events checks them.
	raw := rawEvent{Data: data}
	if len(data) == 0 {
		raw.Data = nil
	}
	ev, herr := raw.event("")
	if herr != nil {
		return &pusher.TriggerError{Status: herr.status, Message: herr.message}
	}
	ev.Name, ev.Channel = event, channel
	chans, payload, herr := prepare(app, ev)
	if herr != nil {
		return &pusher.TriggerError{Status: herr.status, Message: herr.message}
	}
	ms := make([]channels.Message, len(chans))
	for i, ch := range chans {
		ms[i] = a.pub.EventMessage(appID, ch, event, payload, "")
	}
	if err := a.pub.PublishAll(ctx, ms); err != nil {
		return &pusher.TriggerError{Status: http.StatusServiceUnavailable, Message: "Could not publish: " + err.Error()}
	}
	for _, ch := range chans {
		a.pub.ObserveTrigger(appID, pusher.ObservedConsole, ch, event, payload, "")
	}
	return nil
}
