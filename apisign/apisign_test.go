package apisign

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/internal/httpbody"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

var now = time.Unix(1_700_000_000, 0)

func newEcho(t *testing.T, prefix string, limit int64) *echo.Echo {
	t.Helper()
	e := echo.New()
	mw := Middleware(Config{
		Prefix: prefix, Param: "id", MaxBody: limit, Now: func() time.Time { return now },
		Lookup: func(id string) (any, Credentials, bool) {
			if id != "7" {
				return nil, Credentials{}, false
			}
			return "app-7", Credentials{Key: "k", Secret: "s"}, true
		},
	})
	e.POST(prefix+"/apps/:id/channels/:ch", func(c echo.Context) error {
		return c.String(200, App(c).(string)+":"+string(Body(c)))
	}, mw)
	return e
}

// spyBody records whether the middleware read it, and fails every read.
type spyBody struct{ reads atomic.Int32 }

func (s *spyBody) Read([]byte) (int, error) { s.reads.Add(1); return 0, errors.New("read refused") }
func (s *spyBody) Close() error             { return nil }

// An unauthenticated request is answered without reading one byte of its body.
func TestBodyNotReadBeforeSignature(t *testing.T) {
	e := newEcho(t, "", 1<<20)
	for name, query := range map[string]string{
		"unsigned":      "",
		"bad signature": strings.Replace(auth.SignRequest("POST", "/apps/7/channels/c", nil, []byte("x"), "k", "s", now).Encode(), "auth_signature=", "auth_signature=0", 1),
		"expired":       auth.SignRequest("POST", "/apps/7/channels/c", nil, []byte("x"), "k", "s", now.Add(-time.Hour)).Encode(),
	} {
		body := &spyBody{}
		req := httptest.NewRequest("POST", "/apps/7/channels/c?"+query, nil)
		req.Body, req.ContentLength = body, 1<<20
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != 401 || body.reads.Load() != 0 {
			t.Errorf("%s: status %d after %d reads, want 401 after none", name, rec.Code, body.reads.Load())
		}
		// The unread body is not drained at the caller's pace: the connection closes.
		if rec.Header().Get("Connection") != "close" {
			t.Errorf("%s: Connection %q, want close", name, rec.Header().Get("Connection"))
		}
	}
}

func TestStatuses(t *testing.T) {
	signed := func(path string, body string) string {
		return path + "?" + auth.SignRequest("POST", path, nil, []byte(body), "k", "s", now).Encode()
	}
	for _, tc := range []struct {
		name, prefix, target string
		body                 io.Reader
		want                 int
		wantBody             string
	}{
		{"ok", "", signed("/apps/7/channels/c", "hi"), strings.NewReader("hi"), 200, "app-7:hi"},
		{"ok under prefix", "/p", "/p" + signed("/apps/7/channels/c", "hi"), strings.NewReader("hi"), 200, "app-7:hi"},
		// The path is verified as sent: a percent-encoded channel is signed encoded.
		{"escaped path", "", signed("/apps/7/channels/a%40b", "hi"), strings.NewReader("hi"), 200, "app-7:hi"},
		{"escaped path signed decoded", "", "/apps/7/channels/a%40b?" + auth.SignRequest("POST", "/apps/7/channels/a@b", nil, []byte("hi"), "k", "s", now).Encode(), strings.NewReader("hi"), 401, ""},
		{"unknown app", "", signed("/apps/8/channels/c", "hi"), strings.NewReader("hi"), 404, ""},
		{"unreadable body", "", signed("/apps/7/channels/c", "hi"), io.MultiReader(strings.NewReader("h"), errReader{}), 400, ""},
		{"over the limit", "", signed("/apps/7/channels/c", strings.Repeat("a", 11)), strings.NewReader(strings.Repeat("a", 11)), 413, ""},
		{"at the limit", "", signed("/apps/7/channels/c", strings.Repeat("a", 10)), strings.NewReader(strings.Repeat("a", 10)), 200, "app-7:" + strings.Repeat("a", 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEcho(t, tc.prefix, 10)
			req := httptest.NewRequest("POST", tc.target, tc.body)
			req.ContentLength = -1 // read to the end, as a chunked body is
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			if rec.Code != tc.want || (tc.wantBody != "" && rec.Body.String() != tc.wantBody) {
				t.Fatalf("%d %s, want %d %s", rec.Code, rec.Body, tc.want, tc.wantBody)
			}
		})
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestSignedPath(t *testing.T) {
	for _, tc := range []struct {
		url, prefix, want string
		ok                bool
	}{
		{"/apps/1/events", "", "/apps/1/events", true},
		{"/reverb/apps/1/events", "/reverb", "/apps/1/events", true},
		{"/apps/1/events", "/reverb", "", false},
		{"/apps/1/channels/a%2Fb", "", "/apps/1/channels/a%2Fb", true},
	} {
		r, _ := http.NewRequest("GET", "http://x"+tc.url, nil)
		got, ok := SignedPath(r, tc.prefix)
		if got != tc.want || ok != tc.ok {
			t.Errorf("SignedPath(%q, %q) = %q %v, want %q %v", tc.url, tc.prefix, got, ok, tc.want, tc.ok)
		}
	}
}

// TestReadBodyAllocs: a body with a right Content-Length is read in one allocation, and
// bodies of every size around the growth points arrive whole.
func TestReadBodyAllocs(t *testing.T) {
	for _, n := range []int{0, 1, 510, 511, 512, 513, 4096, httpbody.Prealloc, httpbody.Prealloc + 1, 3 * httpbody.Prealloc} {
		for _, cl := range []int64{int64(n), -1} {
			want := strings.Repeat("b", n)
			req := httptest.NewRequest("POST", "/", strings.NewReader(want))
			req.ContentLength = cl
			c := echo.New().NewContext(req, httptest.NewRecorder())
			got, status, _ := readBody(c, 1<<20)
			if status != 0 || string(got) != want {
				t.Fatalf("%d bytes (Content-Length %d): status %d, %d bytes", n, cl, status, len(got))
			}
		}
	}
	if testutil.RaceEnabled {
		return // the race detector changes allocation counts
	}
	body := strings.Repeat("x", 200)
	req := httptest.NewRequest("POST", "/", nil)
	c := echo.New().NewContext(req, httptest.NewRecorder())
	rd := strings.NewReader(body)
	n := testing.AllocsPerRun(100, func() {
		rd.Reset(body)
		req.Body, req.ContentLength = io.NopCloser(rd), int64(len(body))
		if got, _, _ := readBody(c, 1<<20); len(got) != len(body) {
			t.Fatal("short body")
		}
	})
	t.Logf("readBody: %v allocations", n)
	// The buffer and MaxBytesReader: 2 (bytes.Buffer.ReadFrom: 6).
	if n > 2 {
		t.Errorf("readBody: %v allocations, want at most 2", n)
	}
}

// TestSignedContextAllocs: the app and body reach the handler through the middleware's
// context, one allocation (echo's store cost 3: 27 -> 25 per request here).
func TestSignedContextAllocs(t *testing.T) {
	e := newEcho(t, "", 1<<20)
	target := "/apps/7/channels/c?" + auth.SignRequest("POST", "/apps/7/channels/c", nil, []byte("hi"), "k", "s", now).Encode()
	serve := func() {
		req := httptest.NewRequest("POST", target, strings.NewReader("hi"))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Body.String() != "app-7:hi" {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
	serve()
	if testutil.RaceEnabled {
		return
	}
	// The request, the recorder and the handler's answer are the test's; the bound is the
	// count when the guard was written.
	const bound = 25
	if n := testing.AllocsPerRun(100, serve); n > bound {
		t.Errorf("a signed request: %v allocations, want at most %v", n, bound)
	} else {
		t.Logf("a signed request: %v allocations", n)
	}
}
