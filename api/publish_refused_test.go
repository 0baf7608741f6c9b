package api

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/channels"
)

// A publish Redis did not accept in time (scaling.publish_timeout) is answered 503 with
// Retry-After on both publishing endpoints, so a queued Laravel broadcast retries; nothing
// of the request is observed. Before, the 503 had no Retry-After.
func TestPublishRefusedAsksForARetry(t *testing.T) {
	for _, tc := range []struct{ path, body string }{
		{"/apps/" + testAppID + "/events", `{"name":"e","channel":"a","data":"x"}`},
		{"/apps/" + testAppID + "/batch_events", `{"batch":[{"name":"e","channel":"a","data":"x"}]}`},
	} {
		f := &fakeBackend{publishErr: channels.ErrPublishTimeout}
		e := echo.New()
		New(Options{Config: testConfig(), Publisher: f, Info: f, Terminator: f}).Routes(e, "")
		signed := auth.SignRequest("POST", tc.path, nil, []byte(tc.body), testKey, testSecret, time.Now())
		req := httptest.NewRequest("POST", tc.path+"?"+signed.Encode(), bytes.NewReader([]byte(tc.body)))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != 503 || rec.Header().Get("Retry-After") != "1" || len(f.observed) != 0 {
			t.Fatalf("%s: %d, Retry-After %q, observed %v: %s", tc.path, rec.Code, rec.Header().Get("Retry-After"), f.observed, rec.Body)
		}
	}
}
