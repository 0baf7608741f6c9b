package api

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/pusher"
)

// FuzzHTTPAPIBody: any body and query, correctly signed, never gets a 5xx or a panic, and
// every refusal is a JSON body. An unmounted route (404) would be a failure, not a pass.
func FuzzHTTPAPIBody(f *testing.F) {
	f.Add(uint8(0), "", []byte(`{"name":"e","channel":"c","data":"x"}`))
	f.Add(uint8(0), "info=user_count", []byte(`{"name":"e","channels":["presence-a","b"],"data":{"x":1},"info":"user_count,subscription_count"}`))
	f.Add(uint8(0), "", []byte(`{"name":"e","channel":"cache-c","data":"x","socket_id":"1.2"}`))
	f.Add(uint8(0), "", []byte(`{"name":"e","channel":"#server-to-user-1","data":null}`))
	f.Add(uint8(1), "", []byte(`{"batch":[{"name":"e","channel":"c","data":"x","info":"subscription_count"}]}`))
	f.Add(uint8(1), "", []byte(`{"batch":[{"name":"e","channels":["c"],"data":"x"}, null]}`))
	f.Add(uint8(2), "filter_by_prefix=presence-&info=user_count", []byte(nil))
	f.Add(uint8(2), "info=subscription_count,user_count", []byte(`{}`))
	f.Add(uint8(3), "info=user_count,subscription_count,cache", []byte(nil))
	f.Add(uint8(4), "", []byte(nil))
	f.Add(uint8(5), "", []byte(`{}`))
	f.Add(uint8(6), "AUTH_KEY=x&auth_key=y", []byte(nil))
	f.Add(uint8(0), "auth_version=2.0", []byte(`{`))
	f.Add(uint8(0), "", []byte(`{"name":"e","channel":"c","data":"x"}{}`))
	f.Add(uint8(1), "", []byte(`{"batch":[`+strings.Repeat(`{"name":"e","channel":"c","data":"x"},`, 10)+`{}]}`))

	cfg := testConfig()
	s := pusher.NewServer(pusher.Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Cleanup(func() { _ = s.Shutdown(f.Context()) })
	e := echo.New()
	New(Options{Config: cfg, Publisher: s, Info: s, Terminator: s}).Routes(e, "")
	base := "/apps/" + testAppID
	routes := []struct{ method, path string }{
		{"POST", base + "/events"},
		{"POST", base + "/batch_events"},
		{"GET", base + "/channels"},
		{"GET", base + "/channels/presence-a"},
		{"GET", base + "/channels/presence-a/users"},
		{"POST", base + "/users/u1/terminate_connections"},
		{"GET", base + "/connections"},
	}
	f.Fuzz(func(t *testing.T, route uint8, rawQuery string, body []byte) {
		r := routes[int(route)%len(routes)]
		q, _ := url.ParseQuery(rawQuery)
		signed := auth.SignRequest(r.method, r.path, q, body, cfg.Apps[0].Key, cfg.Apps[0].Secret, time.Now())
		req := httptest.NewRequest(r.method, r.path, bytes.NewReader(body))
		req.URL.RawQuery = signed.Encode()
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code >= 500 || rec.Code == http.StatusNotFound {
			t.Fatalf("%s %s?%s body %q: %d %s", r.method, r.path, req.URL.RawQuery, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code != http.StatusOK && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("error answer is not JSON: %d %q", rec.Code, rec.Body.Bytes())
		}
	})
}
