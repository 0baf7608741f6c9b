package pusher

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/apisign/apisigntest"
)

// The Pusher HTTP API gives exactly the refusals of the shared signing table, mounted at
// the root and under a prefix, over a real HTTP connection.
func TestSignedAPIRefusals(t *testing.T) {
	ts := newServer(t, withPrefix("/reverb"))
	for _, prefix := range []string{"", "/reverb"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			apisigntest.Run(t, apisigntest.Surface{
				Method:         "POST",
				Prefix:         prefix,
				Path:           "/apps/" + testAppID + "/events",
				UnknownAppPath: "/apps/999/events",
				Key:            testKey,
				Secret:         testSecret,
				Body:           []byte(`{"name":"e","channel":"c","data":"x"}`),
				Accepted:       200,
				MaxBody:        ts.cfg.Server.MaxRequestSize,
				Now:            time.Now,
				Do: func(t testing.TB, method, target string, body io.Reader, n int64) (int, []byte) {
					req, err := http.NewRequest(method, ts.ts.URL+target, body)
					if err != nil {
						t.Fatal(err)
					}
					req.ContentLength = n
					resp, err := ts.ts.Client().Do(req)
					if err != nil {
						t.Fatal(err)
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatal(err)
					}
					return resp.StatusCode, b
				},
			})
		})
	}
}
