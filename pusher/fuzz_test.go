package pusher

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
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/reverbgo/reverbgo/auth"
)

// FuzzDecodeClientMessage: no client frame makes the decoders panic, and whatever a client
// event's data is, the relayed frame is valid JSON.
func FuzzDecodeClientMessage(f *testing.F) {
	for _, s := range []string{
		`{"event":"pusher:subscribe","data":{"channel":"a","auth":"k:s","channel_data":"{\"user_id\":1}"}}`,
		`{"event":"pusher:subscribe","data":"{\"channel\":\"a\"}"}`,
		`{"event":"pusher:subscribe","data":"\"nested\""}`,
		`{"event":"pusher:signin","data":{"auth":"k:s","user_data":"{\"id\":\"1\"}"}}`,
		`{"event":"pusher:signin","data":"{\"auth\":\"k:s\",\"user_data\":\"x\"}"}`,
		`{"event":"client-x","channel":"private-a","data":"{\"a\":1}"}`,
		`{"event":"client-x","channel":"private-a","data":{"a":[1,2,{"b":null}]}}`,
		`{"event":"client-x","channel":"private-a","data":"\u2028\ud800"}`,
		`{"event":"pusher:ping","data":null}`,
		`{"event":"x","data":   "  "}`,
		`{"event":"x","data":"`,
		`{"event":""}`,
		`[]`, `null`, `""`, ``, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, data := range []json.RawMessage{b, nil} {
			_, _ = DecodeSubscribe(data)
			_, _ = DecodeSignin(data)
			_ = clientEventData(data)
		}
		m, err := DecodeClientMessage(b)
		if err != nil {
			return
		}
		if m.Event == "" {
			t.Fatal("decoded a message without event")
		}
		if sd, err := DecodeSubscribe(m.Data); err == nil && sd.Channel == "" {
			t.Fatal("subscribe without channel accepted")
		}
		if sd, err := DecodeSignin(m.Data); err == nil && (sd.Auth == "" || sd.UserData == "") {
			t.Fatal("signin without auth or user_data accepted")
		}
		data := clientEventData(m.Data)
		ev := AppendEvent(nil, m.Event, m.Channel, data, "7", true)
		var back struct {
			Event, Channel, Data string
			UserID               string `json:"user_id"`
		}
		if err := json.Unmarshal(ev, &back); err != nil {
			t.Fatalf("relayed frame is not JSON: %s: %v", ev, err)
		}
		if utf8.ValidString(data) && back.Data != data {
			t.Fatalf("data %q came back as %q", data, back.Data)
		}
	})
}

// FuzzAppendJSONString: the output is always valid JSON; for valid UTF-8 it decodes to the
// input, otherwise to what encoding/json would make of it.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", `"quoted" \back\slash`, "\x00\x01\x1f\x7f", "\n\r\t\b\f",
		"héllo 😀", "\u2028\u2029", "<script>&amp;</script>", "\xff", "a\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := appendJSONString([]byte("prefix"), s)
		if !bytes.HasPrefix(out, []byte("prefix")) {
			t.Fatal("dst prefix lost")
		}
		out = out[len("prefix"):]
		if !json.Valid(out) {
			t.Fatalf("invalid JSON for %q: %s", s, out)
		}
		var got string
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) {
			if got != s {
				t.Fatalf("round trip %q -> %s -> %q", s, out, got)
			}
			return
		}
		std, _ := json.Marshal(s)
		var want string
		_ = json.Unmarshal(std, &want)
		if got != want {
			t.Fatalf("invalid UTF-8 %q decoded as %q, encoding/json gives %q", s, got, want)
		}
	})
}

// FuzzHTTPAPIBody: any body and query, correctly signed, never gets a 5xx or a panic.
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
	s := NewServer(Options{Config: cfg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	f.Cleanup(func() { _ = s.Shutdown(f.Context()) })
	e := echo.New()
	s.Routes(e, "")
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
		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s body %q: %d %s", r.method, r.path, req.URL.RawQuery, body, rec.Code, rec.Body.Bytes())
		}
		if rec.Code != http.StatusOK && !json.Valid(rec.Body.Bytes()) {
			t.Fatalf("error answer is not JSON: %d %q", rec.Code, rec.Body.Bytes())
		}
	})
}
