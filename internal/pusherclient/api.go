package pusherclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/reverbgo/reverbgo/auth"
)

// BaseURL is addr as an HTTP base: host:port becomes http://host:port; a URL stays.
func BaseURL(addr string) string {
	if strings.Contains(addr, "://") {
		return strings.TrimSuffix(addr, "/")
	}
	return "http://" + addr
}

// API sends a Pusher HTTP API request to addr (host:port or a base URL), signed as the
// Pusher server SDKs sign it, and returns the status and (up to 4 MiB of) the body.
func API(ctx context.Context, hc *http.Client, addr string, app App, method, path string, query url.Values, body []byte) (int, []byte, error) {
	req, err := NewRequest(ctx, addr, app, method, path, query, body)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, b, err
}

// NewRequest is the HTTP API request API sends, for a caller that times or sends it
// itself: signed now with app's secret, with a JSON content type.
func NewRequest(ctx context.Context, addr string, app App, method, path string, query url.Values, body []byte) (*http.Request, error) {
	q := auth.SignRequest(method, path, query, body, app.Key, app.Secret, time.Now())
	var r io.Reader
	if len(body) > 0 {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, BaseURL(addr)+path+"?"+q.Encode(), r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// Event is one event of Trigger and TriggerBatch.
type Event struct {
	Name     string `json:"name"`
	Channel  string `json:"channel"`
	Data     string `json:"data"`
	SocketID string `json:"socket_id,omitempty"`
}

// Trigger publishes one event through POST /apps/{id}/events and returns the status.
func Trigger(ctx context.Context, hc *http.Client, addr string, app App, channel, name, data string) (int, error) {
	body, err := json.Marshal(Event{Name: name, Channel: channel, Data: data})
	if err != nil {
		return 0, err
	}
	st, _, err := API(ctx, hc, addr, app, http.MethodPost, "/apps/"+app.ID+"/events", nil, body)
	return st, err
}

// TriggerBatch publishes events through POST /apps/{id}/batch_events and returns the
// status and body.
func TriggerBatch(ctx context.Context, hc *http.Client, addr string, app App, events []Event) (int, []byte, error) {
	body, err := json.Marshal(map[string][]Event{"batch": events})
	if err != nil {
		return 0, nil, err
	}
	return API(ctx, hc, addr, app, http.MethodPost, "/apps/"+app.ID+"/batch_events", nil, body)
}
