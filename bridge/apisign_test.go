package bridge

import (
	"io"
	"net/http/httptest"
	"testing"

	"github.com/reverbgo/reverbgo/apisign/apisigntest"
)

// The Toolmark app API gives exactly the refusals of the shared signing table (the same
// table as the Pusher HTTP API), with the bridge's own body limit.
func TestSignedAppAPIRefusals(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Limits.MaxBody = 4096 })
	apisigntest.Run(t, apisigntest.Surface{
		Method:         "POST",
		Prefix:         prefix,
		Path:           "/apps/app1/toolmark/calls",
		UnknownAppPath: "/apps/nope/toolmark/calls",
		Key:            "key1",
		Secret:         "secret1",
		Body:           []byte(callBody), // no page is connected: 200 with an error result
		Accepted:       200,
		MaxBody:        4096,
		Now:            h.clock.Now,
		Do: func(t testing.TB, method, target string, body io.Reader, n int64) (int, []byte) {
			req := httptest.NewRequest(method, target, body)
			req.ContentLength = n
			if n < 0 {
				req.TransferEncoding = []string{"chunked"}
			}
			rec := h.do(req)
			return rec.Code, rec.Body.Bytes()
		},
	})
}
