package testutil

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
)

// EventTimeout bounds every wait of a server-under-test suite for a frame or a close that
// should arrive (WaitTimeout is WaitFor's, for state).
const EventTimeout = 5 * time.Second

// QuietPeriod is how long a suite watches for something that must NOT arrive.
const QuietPeriod = 150 * time.Millisecond

// The one app of TestConfig.
const (
	TestAppID  = "1001"
	TestKey    = "test-key"
	TestSecret = "test-secret"
)

// TestConfig is the config the pusher and api suites start their server with, built by
// hand with every App field set explicitly (no config.Load).
func TestConfig() *config.Config {
	return &config.Config{
		Server: config.Server{MaxRequestSize: 10000},
		Apps: []config.App{{
			ID:                     TestAppID,
			Key:                    TestKey,
			Secret:                 TestSecret,
			AllowedOrigins:         []string{"*"},
			PingInterval:           60,
			ActivityTimeout:        30,
			MaxMessageSize:         10000,
			AcceptClientEventsFrom: "members",
			MaxPresenceMembers:     100,
			MaxBatchSize:           10,
		}},
	}
}

// RawAPI sends an unsigned request with the given path and query to ts (a JSON content
// type when there is a body) and returns the status and body; any transport error fails t.
func RawAPI(t testing.TB, ts *httptest.Server, method, pathAndQuery string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, ts.URL+pathAndQuery, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	return Do(t, ts.Client(), req)
}

// Do sends req with hc and returns the status and the whole body; any transport error
// fails t.
func Do(t testing.TB, hc *http.Client, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// MustMarshal is json.Marshal that fails t on error.
func MustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MustJSONMap decodes b as a JSON object or fails t.
func MustJSONMap(t testing.TB, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", b, err)
	}
	return m
}

// DataString is a frame's data decoded from the JSON string the server sends it as; a
// data that is not a string fails t, naming event and the raw frame.
func DataString(t testing.TB, event string, data json.RawMessage, raw []byte) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("%s: data is not a JSON string: %s", event, raw)
	}
	return s
}
