package webhooks

import (
	"errors"
	"net/url"
)

// Observer sees webhook deliveries for the debug console: batches acknowledged and failed
// attempts. url is the logged form (credentials removed). It is attached only while a
// console is open; implementations must not block.
type Observer interface {
	WebhookSent(appID, url string, events, attempts int)
	WebhookFailed(appID, url string, events, attempt int, err string)
}

type observerBox struct{ o Observer }

// SetObserver attaches o, or detaches the observer with nil.
func (d *Dispatcher) SetObserver(o Observer) {
	if o == nil {
		d.obs.Store(nil)
		return
	}
	d.obs.Store(&observerBox{o: o})
}

func (ob *outbox) observe(events, attempt int, err error) {
	box := ob.d.obs.Load()
	if box == nil {
		return
	}
	if err == nil {
		box.o.WebhookSent(ob.appID, ob.logURL, events, attempt)
		return
	}
	// A *url.Error repeats the full URL, credentials included: keep only its cause.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	box.o.WebhookFailed(ob.appID, ob.logURL, events, attempt, err.Error())
}
