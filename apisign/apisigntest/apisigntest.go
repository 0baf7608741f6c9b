// Package apisigntest is the one table of refusals every signed API must give, run by the
// tests of each surface (Pusher HTTP API, Toolmark app API) against its real routes, so the
// two cannot disagree on a status.
package apisigntest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/auth"
)

// Surface is one signed route of a server under test.
type Surface struct {
	Method string
	// Prefix is the mount prefix the routes are served under ("" for none). Requests are
	// sent to Prefix+Path and signed over Path, as SDKs do.
	Prefix string
	// Path is the route path without the prefix, naming an existing app.
	Path string
	// UnknownAppPath is the same route naming an app id that does not exist.
	UnknownAppPath string
	Key, Secret    string
	// Body is a body the handler accepts; Accepted the status it then answers.
	Body     []byte
	Accepted int
	// MaxBody is the route's body limit in bytes.
	MaxBody int64
	// Now is the server's clock.
	Now func() time.Time
	// Do sends method to pathAndQuery with body (contentLength -1 = unknown, sent chunked)
	// and returns the status and response body.
	Do func(t testing.TB, method, pathAndQuery string, body io.Reader, contentLength int64) (int, []byte)
}

type tcase struct {
	name   string
	path   string // signed path; "" = s.Path
	sendTo string // path requested without prefix; "" = s.Path
	body   []byte // body signed
	sent   []byte // body sent; nil = body
	chunk  bool   // send without Content-Length
	mod    func(q url.Values)
	key    string
	secret string
	at     time.Duration // signing time relative to Now
	want   int
}

// allCases is the table: every way a signed request can be refused, and the valid ones.
func allCases(s Surface) []tcase {
	over := append(append([]byte(`{"x":"`), bytes.Repeat([]byte("a"), int(s.MaxBody))...), `"}`...)
	return []tcase{
		{name: "valid", want: s.Accepted},
		{name: "valid chunked", chunk: true, want: s.Accepted},
		{name: "unknown app", path: s.UnknownAppPath, sendTo: s.UnknownAppPath, want: 404},
		{name: "no signature", mod: func(q url.Values) { q.Del("auth_signature") }, want: 401},
		{name: "no auth_key", mod: func(q url.Values) { q.Del("auth_key") }, want: 401},
		{name: "no timestamp", mod: func(q url.Values) { q.Del("auth_timestamp") }, want: 401},
		{name: "bad signature", mod: func(q url.Values) { q.Set("auth_signature", strings.Repeat("0", 64)) }, want: 401},
		{name: "wrong secret", secret: "not-the-secret", want: 401},
		{name: "unknown key", key: "not-the-key", want: 401},
		{name: "expired", at: -auth.MaxClockSkew - 5*time.Second, want: 401},
		{name: "from the future", at: auth.MaxClockSkew + 5*time.Second, want: 401},
		{name: "at the window's edge", at: -auth.MaxClockSkew + 5*time.Second, want: s.Accepted},
		{name: "bad auth_version", mod: func(q url.Values) { q.Set("auth_version", "2.0") }, want: 401},
		{name: "signed with the prefix", path: s.Prefix + s.Path, want: 401},
		{name: "signed for another path", path: s.Path + "x", want: 401},
		{name: "body tampered", sent: append(append([]byte{}, s.Body...), ' '), want: 401},
		{name: "body tampered chunked", sent: append(append([]byte{}, s.Body...), ' '), chunk: true, want: 401},
		{name: "body without body_md5", body: []byte{}, sent: s.Body, want: 401},
		{name: "too large", body: over, want: 413},
		{name: "too large chunked", body: over, chunk: true, want: 413},
		{name: "too large unsigned", body: over, mod: func(q url.Values) { q.Del("auth_signature") }, want: 401},
	}
}

// Run checks every refusal of the signing middleware on s, and that a valid request passes.
func Run(t *testing.T, s Surface) {
	for _, tc := range allCases(s) {
		if tc.name == "signed with the prefix" && s.Prefix == "" {
			continue // it would sign the plain path
		}
		t.Run(tc.name, func(t *testing.T) {
			path, sendTo, body, key, secret := s.Path, s.Path, s.Body, s.Key, s.Secret
			if tc.path != "" {
				path = tc.path
			}
			if tc.sendTo != "" {
				sendTo = tc.sendTo
			}
			if tc.body != nil {
				body = tc.body
			}
			if tc.key != "" {
				key = tc.key
			}
			if tc.secret != "" {
				secret = tc.secret
			}
			sent := body
			if tc.sent != nil {
				sent = tc.sent
			}
			q := auth.SignRequest(s.Method, path, nil, body, key, secret, s.Now().Add(tc.at))
			if tc.mod != nil {
				tc.mod(q)
			}
			var r io.Reader = bytes.NewReader(sent)
			n := int64(len(sent))
			if tc.chunk {
				r, n = struct{ io.Reader }{r}, -1
			}
			if len(sent) == 0 {
				r, n = nil, 0
			}
			status, resp := s.Do(t, s.Method, s.Prefix+sendTo+"?"+q.Encode(), r, n)
			if status != tc.want {
				t.Fatalf("status %d, want %d (%s)", status, tc.want, resp)
			}
			if tc.want >= 400 {
				var e map[string]string
				if err := json.Unmarshal(resp, &e); err != nil || e["error"] == "" || len(e) != 1 {
					t.Fatalf("body %s is not {\"error\": ...}", resp)
				}
			}
		})
	}
}
