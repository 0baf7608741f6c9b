package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/reverbgo/reverbgo/channels"
	"github.com/reverbgo/reverbgo/config"
)

// Pusher HTTP API limits.
const (
	maxTriggerChannels = 100
	maxEventNameLength = 200
	// maxSocketIDLength bounds socket_id before the pattern runs: two uint64s and a dot.
	maxSocketIDLength = 41
)

var socketIDPattern = regexp.MustCompile(`^\d+\.\d+$`)

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

// httpError is a refused request: the status and the {"error": message} it answers.
type httpError struct {
	status  int
	message string
}

func (e *httpError) Error() string { return e.message }

// prepare validates an event and returns its target channels and its data string.
func prepare(app *config.App, ev *triggerEvent) ([]string, string, *httpError) {
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
	if len(data) > app.MaxMessageSize {
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

// decodeJSON decodes exactly one JSON value: trailing data is refused.
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

// rawEvent is an event of POST /events or of a batch as it came, each field still JSON, so
// that a value of the wrong type is refused with a message naming the field rather than
// decoding's generic error.
type rawEvent struct {
	Name     json.RawMessage `json:"name"`
	Data     json.RawMessage `json:"data"`
	Channels json.RawMessage `json:"channels"`
	Channel  json.RawMessage `json:"channel"`
	SocketID json.RawMessage `json:"socket_id"`
	Info     json.RawMessage `json:"info"`
}

// badField is the 400 for a field of the wrong type; at prefixes it in a batch ("batch[2]: ").
func badField(at, field, want string) *httpError {
	return &httpError{http.StatusBadRequest, fmt.Sprintf("%s%s must be %s", at, field, want)}
}

// absent reports whether a JSON value is missing or null, which optional fields accept.
func absent(raw json.RawMessage) bool {
	d := bytes.TrimSpace(raw)
	return len(d) == 0 || string(d) == "null"
}

// jsonString decodes raw as a JSON string; ok is false for any other JSON type.
func jsonString(raw json.RawMessage) (string, bool) {
	d := bytes.TrimSpace(raw)
	if len(d) == 0 || d[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(d, &s) != nil {
		return "", false
	}
	return s, true
}

// event checks the JSON type of every field and returns the typed event. Optional fields
// (channels, channel, socket_id, info) may be absent or null; name and data are required
// (their other checks are prepare's).
func (r *rawEvent) event(at string) (*triggerEvent, *httpError) {
	ev := &triggerEvent{}
	var ok bool
	if !absent(r.Name) {
		if ev.Name, ok = jsonString(r.Name); !ok {
			return nil, badField(at, "name", "a string")
		}
	}
	if !absent(r.Data) {
		if ev.Data, ok = jsonString(r.Data); !ok {
			return nil, badField(at, "data", "a string (JSON-encode objects first, as every SDK does)")
		}
		ev.HasData = true
	}
	if !absent(r.Channels) {
		var items []json.RawMessage
		if bytes.TrimSpace(r.Channels)[0] != '[' || json.Unmarshal(r.Channels, &items) != nil {
			return nil, badField(at, "channels", "an array of strings")
		}
		ev.Channels = make([]string, len(items))
		for i, item := range items {
			if ev.Channels[i], ok = jsonString(item); !ok {
				return nil, badField(at, "channels", "an array of strings")
			}
		}
	}
	if !absent(r.Channel) {
		if ev.Channel, ok = jsonString(r.Channel); !ok {
			return nil, badField(at, "channel", "a string")
		}
	}
	if !absent(r.SocketID) {
		ev.SocketID, ok = jsonString(r.SocketID)
		if !ok || len(ev.SocketID) > maxSocketIDLength || !socketIDPattern.MatchString(ev.SocketID) {
			return nil, badField(at, "socket_id", `a socket id (a string matching ^\d+\.\d+$)`)
		}
	}
	if !absent(r.Info) {
		if ev.Info, ok = jsonString(r.Info); !ok {
			return nil, badField(at, "info", `a string ("user_count,subscription_count")`)
		}
	}
	return ev, nil
}

// decodeEvent decodes the body of POST /events.
func decodeEvent(body []byte) (*triggerEvent, *httpError) {
	var r rawEvent
	if err := decodeJSON(body, &r); err != nil {
		return nil, &httpError{http.StatusBadRequest, "Body must be a JSON event object"}
	}
	return r.event("")
}

// decodeBatch decodes the body of POST /batch_events.
func decodeBatch(body []byte) ([]*triggerEvent, *httpError) {
	var req struct {
		Batch json.RawMessage `json:"batch"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return nil, &httpError{http.StatusBadRequest, "Body must be {\"batch\": [...]}"}
	}
	var items []json.RawMessage
	if absent(req.Batch) || bytes.TrimSpace(req.Batch)[0] != '[' || json.Unmarshal(req.Batch, &items) != nil {
		return nil, &httpError{http.StatusBadRequest, "batch must be an array of event objects"}
	}
	out := make([]*triggerEvent, len(items))
	for i, item := range items {
		at := fmt.Sprintf("batch[%d]: ", i)
		d := bytes.TrimSpace(item)
		var r rawEvent
		if len(d) == 0 || d[0] != '{' || json.Unmarshal(d, &r) != nil {
			return nil, &httpError{http.StatusBadRequest, at + "each batch item must be an event object"}
		}
		ev, herr := r.event(at)
		if herr != nil {
			return nil, herr
		}
		out[i] = ev
	}
	return out, nil
}
