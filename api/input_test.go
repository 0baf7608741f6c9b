package api

import (
	"strings"
	"testing"
)

// Each field of the wrong JSON type is a 400 whose message names the field, for POST
// /events and for every item of a batch; nothing is published.
func TestAPIInputTypes(t *testing.T) {
	ts := newServer(t)
	c := ts.connect(t)
	c.Subscribe("c")
	events := "/apps/" + testAppID + "/events"
	batch := "/apps/" + testAppID + "/batch_events"
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"data number", events, `{"name":"e","channel":"c","data":5}`, "data must be a string"},
		{"data object", events, `{"name":"e","channel":"c","data":{"a":1}}`, "data must be a string"},
		{"data array", events, `{"name":"e","channel":"c","data":["x"]}`, "data must be a string"},
		{"data bool", events, `{"name":"e","channel":"c","data":true}`, "data must be a string"},
		{"name number", events, `{"name":5,"channel":"c","data":"x"}`, "name must be a string"},
		{"name array", events, `{"name":["e"],"channel":"c","data":"x"}`, "name must be a string"},
		{"channels string", events, `{"name":"e","channels":"c","data":"x"}`, "channels must be an array of strings"},
		{"channels of numbers", events, `{"name":"e","channels":[1,2],"data":"x"}`, "channels must be an array of strings"},
		{"channels of null", events, `{"name":"e","channels":[null],"data":"x"}`, "channels must be an array of strings"},
		{"channels object", events, `{"name":"e","channels":{"a":"c"},"data":"x"}`, "channels must be an array of strings"},
		{"channel number", events, `{"name":"e","channel":7,"data":"x"}`, "channel must be a string"},
		{"channel array", events, `{"name":"e","channel":["c"],"data":"x"}`, "channel must be a string"},
		{"socket_id number", events, `{"name":"e","channel":"c","data":"x","socket_id":123.456}`, "socket_id must be a socket id"},
		{"socket_id not an id", events, `{"name":"e","channel":"c","data":"x","socket_id":"abc"}`, "socket_id must be a socket id"},
		{"socket_id half", events, `{"name":"e","channel":"c","data":"x","socket_id":"123."}`, "socket_id must be a socket id"},
		{"socket_id too long", events, `{"name":"e","channel":"c","data":"x","socket_id":"1.` + strings.Repeat("1", 60) + `"}`, "socket_id must be a socket id"},
		{"info number", events, `{"name":"e","channel":"c","data":"x","info":1}`, "info must be a string"},
		{"info array", events, `{"name":"e","channel":"c","data":"x","info":["user_count"]}`, "info must be a string"},
		{"batch not an array", batch, `{"batch":{"name":"e"}}`, "batch must be an array"},
		{"batch of strings", batch, `{"batch":["e"]}`, "batch[0]: each batch item must be an event object"},
		{"batch data", batch, `{"batch":[{"name":"e","channel":"c","data":"x"},{"name":"e","channel":"c","data":1}]}`, "batch[1]: data must be a string"},
		{"batch name", batch, `{"batch":[{"name":1,"channel":"c","data":"x"}]}`, "batch[0]: name must be a string"},
		{"batch channel", batch, `{"batch":[{"name":"e","channel":["c"],"data":"x"}]}`, "batch[0]: channel must be a string"},
		{"batch socket_id", batch, `{"batch":[{"name":"e","channel":"c","data":"x","socket_id":"x.1"}]}`, "batch[0]: socket_id must be a socket id"},
		{"batch info", batch, `{"batch":[{"name":"e","channel":"c","data":"x","info":{}}]}`, "batch[0]: info must be a string"},
		{"batch missing data", batch, `{"batch":[{"name":"e","channel":"c"}]}`, "batch[0]: data is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, b := ts.api(t, "POST", tc.path, nil, []byte(tc.body))
			if st != 400 {
				t.Fatalf("status %d, want 400: %s", st, b)
			}
			if msg, _ := mustJSONMap(t, b)["error"].(string); !strings.Contains(msg, tc.field) {
				t.Fatalf("error %q does not say %q", msg, tc.field)
			}
		})
	}
	// Absent or null optional fields are accepted, and a valid socket_id excludes nobody here.
	for _, body := range []string{
		`{"name":"ok1","channel":"c","data":"x","socket_id":null,"info":null,"channels":null}`,
		`{"name":"ok2","channels":["c"],"data":"","socket_id":"1.2"}`,
	} {
		if st, b := ts.api(t, "POST", events, nil, []byte(body)); st != 200 {
			t.Fatalf("%s: %d %s", body, st, b)
		}
	}
	c.WaitEvent("ok1", "c")
	c.WaitEvent("ok2", "c")
	c.ExpectNone("e", "")
}
