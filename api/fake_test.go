package api

import (
	"bytes"
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/channels"
)

// fakeBackend implements Publisher, Info and Terminator in memory, failing on demand.
type fakeBackend struct {
	mu         sync.Mutex
	published  []channels.Message
	observed   []string
	terminated []string

	publishErr, membersErr, terminateErr error
	counts                               map[string]int
	members                              map[string][]channels.Member
	conns                                int
}

func (f *fakeBackend) EventMessage(appID, channel, event, data, except string) channels.Message {
	return channels.Message{AppID: appID, Channel: channel, Frame: []byte(event + "|" + data), Except: except}
}

func (f *fakeBackend) PublishAll(_ context.Context, ms []channels.Message) error {
	if f.publishErr != nil {
		return f.publishErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published = append(f.published, ms...)
	return nil
}

func (f *fakeBackend) ObserveTrigger(appID, kind, channel, event, data, socketID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observed = append(f.observed, kind+" "+channel+" "+event)
}

func (f *fakeBackend) SubscriptionCount(_ context.Context, appID, channel string) (int, error) {
	return f.counts[channel], nil
}

func (f *fakeBackend) ChannelsWithPrefix(_ context.Context, appID, prefix string) []channels.ChannelInfo {
	var out []channels.ChannelInfo
	for _, name := range []string{"a", "presence-p"} {
		if n := f.counts[name]; n > 0 && len(name) >= len(prefix) && name[:len(prefix)] == prefix {
			out = append(out, channels.ChannelInfo{Name: name, SubscriptionCount: n})
		}
	}
	return out
}

func (f *fakeBackend) Members(_ context.Context, appID, channel string) ([]channels.Member, error) {
	if f.membersErr != nil {
		return nil, f.membersErr
	}
	return f.members[channel], nil
}

func (f *fakeBackend) ClusterConnections(context.Context, string) int { return f.conns }

func (f *fakeBackend) TerminateUser(_ context.Context, appID, userID string) error {
	if f.terminateErr != nil {
		return f.terminateErr
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.terminated = append(f.terminated, appID+"/"+userID)
	return nil
}

// serveFake answers one signed request through an API over f.
func serveFake(t *testing.T, f *fakeBackend, method, path string, q url.Values, body []byte) (int, string) {
	t.Helper()
	e := echo.New()
	New(Options{Config: testConfig(), Publisher: f, Info: f, Terminator: f}).Routes(e, "")
	signed := auth.SignRequest(method, path, q, body, testKey, testSecret, time.Now())
	req := httptest.NewRequest(method, path+"?"+signed.Encode(), bytes.NewReader(body))
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// Every answer's exact bytes, including the 503s of a backend that cannot publish, reach
// presence or reach every node: SDKs and outside tests compare them.
func TestAnswersOverFakeBackend(t *testing.T) {
	down := errors.New("redis: connection refused")
	base := "/apps/" + testAppID
	event := []byte(`{"name":"e","channel":"a","data":"x"}`)
	tests := []struct {
		name         string
		fake         *fakeBackend
		method, path string
		q            url.Values
		body         []byte
		status       int
		answer       string
	}{
		{"event", &fakeBackend{}, "POST", base + "/events", nil, event, 200, "{}\n"},
		{"event with info", &fakeBackend{counts: map[string]int{"a": 3}}, "POST", base + "/events", nil,
			[]byte(`{"name":"e","channel":"a","data":"x","info":"subscription_count,user_count"}`), 200,
			`{"channels":{"a":{"subscription_count":3}}}` + "\n"},
		{"event, publish refused", &fakeBackend{publishErr: down}, "POST", base + "/events", nil, event, 503,
			`{"error":"Could not publish: redis: connection refused"}` + "\n"},
		{"batch", &fakeBackend{}, "POST", base + "/batch_events", nil, []byte(`{"batch":[{"name":"e","channel":"a","data":"x"}]}`), 200,
			`{"batch":{}}` + "\n"},
		{"batch, publish refused", &fakeBackend{publishErr: down}, "POST", base + "/batch_events", nil,
			[]byte(`{"batch":[{"name":"e","channel":"a","data":"x"}]}`), 503,
			`{"error":"Could not publish: redis: connection refused"}` + "\n"},
		{"batch item refused", &fakeBackend{}, "POST", base + "/batch_events", nil,
			[]byte(`{"batch":[{"name":"e","channel":"a","data":"x"},{"name":"","channel":"a","data":"x"}]}`), 400,
			`{"error":"batch[1]: name is required (at most 200 characters)"}` + "\n"},
		{"channels", &fakeBackend{counts: map[string]int{"a": 2, "presence-p": 1}}, "GET", base + "/channels",
			url.Values{"info": {"subscription_count"}}, nil, 200,
			`{"channels":{"a":{"subscription_count":2},"presence-p":{"subscription_count":1}}}` + "\n"},
		{"channel", &fakeBackend{counts: map[string]int{"a": 2}}, "GET", base + "/channels/a",
			url.Values{"info": {"subscription_count"}}, nil, 200, `{"occupied":true,"subscription_count":2}` + "\n"},
		{"users", &fakeBackend{members: map[string][]channels.Member{"presence-p": {{UserID: "u1"}, {UserID: "u2"}}}},
			"GET", base + "/channels/presence-p/users", nil, nil, 200, `{"users":[{"id":"u1"},{"id":"u2"}]}` + "\n"},
		{"users, presence down", &fakeBackend{membersErr: down}, "GET", base + "/channels/presence-p/users", nil, nil, 503,
			`{"error":"Presence is unavailable"}` + "\n"},
		{"connections", &fakeBackend{conns: 7}, "GET", base + "/connections", nil, nil, 200, `{"connections":7}` + "\n"},
		{"terminate", &fakeBackend{}, "POST", base + "/users/u%201/terminate_connections", nil, []byte(`{}`), 200, "{}\n"},
		{"terminate, nodes unreachable", &fakeBackend{terminateErr: down}, "POST", base + "/users/u1/terminate_connections", nil,
			[]byte(`{}`), 503, `{"error":"Could not reach every node: redis: connection refused"}` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, answer := serveFake(t, tc.fake, tc.method, tc.path, tc.q, tc.body)
			if st != tc.status || answer != tc.answer {
				t.Fatalf("got %d %q, want %d %q", st, answer, tc.status, tc.answer)
			}
		})
	}
}

// A refused publish observes nothing; an accepted one publishes each channel once, with the
// excluded socket, and observes each as an API trigger.
func TestPublishAllOrNothing(t *testing.T) {
	f := &fakeBackend{publishErr: errors.New("backlog full")}
	body := []byte(`{"name":"e","channels":["a","b"],"data":"x","socket_id":"1.2"}`)
	if st, _ := serveFake(t, f, "POST", "/apps/"+testAppID+"/events", nil, body); st != 503 || len(f.observed) != 0 {
		t.Fatalf("refused publish: %d, observed %v", st, f.observed)
	}
	f.publishErr = nil
	if st, answer := serveFake(t, f, "POST", "/apps/"+testAppID+"/events", nil, body); st != 200 {
		t.Fatalf("%d %s", st, answer)
	}
	if len(f.published) != 2 || f.published[0].Channel != "a" || f.published[1].Channel != "b" ||
		f.published[0].Except != "1.2" || string(f.published[1].Frame) != "e|x" {
		t.Fatalf("published %+v", f.published)
	}
	if len(f.observed) != 2 || f.observed[0] != "api_trigger a e" {
		t.Fatalf("observed %v", f.observed)
	}
	if st, _ := serveFake(t, f, "POST", "/apps/"+testAppID+"/users/u1/terminate_connections", nil, []byte(`{}`)); st != 200 ||
		len(f.terminated) != 1 || f.terminated[0] != testAppID+"/u1" {
		t.Fatalf("terminate: %d %v", st, f.terminated)
	}
}
