package bridge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

func TestPageGate(t *testing.T) {
	h := newHarness(t, nil)
	good := manifestMsg(client1, 1, "")
	for _, tc := range []struct {
		name, sid, conv, origin string
		want                    int
	}{
		{"no socket header", "", "c1", "", 401},
		{"malformed socket", "nope", "c1", "", 401},
		{"socket id too long", "1." + strings.Repeat("1", 40), "c1", "", 401},
		{"unknown socket", "9.9", "c1", "", 401},
		{"not subscribed", "2.1", "c1", "", 403},
		{"other conversation", "1.1", "c2", "", 403},
		{"two users for one conversation", "3.1", "c1", "", 403},
		{"toolmark disabled", "4.1", "c1", "", 403},
		{"origin not allowed", "1.1", "c1", "https://evil.test", 403},
		{"origin allowed", "1.1", "c1", "https://app.example.com", 204},
		{"subscribed", "1.1", "c1", "", 204},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, prefix+"/toolmark/bridge/"+tc.conv, strings.NewReader(good))
			if tc.sid != "" {
				req.Header.Set("X-Socket-ID", tc.sid)
				req.Header.Set("X-Toolmark-Token", pageToken(tc.sid))
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			rec := h.do(req)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tc.want, rec.Body)
			}
			if tc.want == 204 && tc.origin != "" && rec.Header().Get("Access-Control-Allow-Origin") != tc.origin {
				t.Fatalf("CORS origin not echoed: %v", rec.Header())
			}
		})
	}
}

// TestPageToken: with page_auth token (the default) the socket id alone does not speak for
// the page; checks run in the documented order (unknown socket 401, not subscribed 403,
// then token 401). With socket_id the id is enough.
func TestPageToken(t *testing.T) {
	good := manifestMsg(client1, 1, "")
	for _, mode := range []string{"", config.PageAuthToken, config.PageAuthSocketID} {
		h := newHarness(t, func(o *Options) { o.Apps.(testutil.Apps).AppByID("app1").Toolmark.PageAuth = mode })
		weak := mode == config.PageAuthSocketID
		for _, tc := range []struct {
			name, sid, conv, token string
			want, weakWant         int
		}{
			{"no token", "1.1", "c1", "", 401, 204},
			{"wrong token", "1.1", "c1", "token-of-5.1", 401, 204},
			{"token of another socket", "1.1", "c1", pageToken("6.1"), 401, 204},
			{"token prefix", "1.1", "c1", pageToken("1.1")[:10], 401, 204},
			{"unknown socket before token", "9.1", "c1", "", 401, 401},
			{"not subscribed before token", "2.1", "c1", "", 403, 403},
			{"right token", "1.1", "c1", pageToken("1.1"), 204, 204},
		} {
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				req := httptest.NewRequest(http.MethodPost, prefix+"/toolmark/bridge/"+tc.conv, strings.NewReader(good))
				req.Header.Set("X-Socket-ID", tc.sid)
				if tc.token != "" {
					req.Header.Set("X-Toolmark-Token", tc.token)
				}
				want := tc.want
				if weak {
					want = tc.weakWant
				}
				if rec := h.do(req); rec.Code != want {
					t.Fatalf("status %d, want %d (%s)", rec.Code, want, rec.Body)
				}
			})
		}
	}
}

func TestValidSocketID(t *testing.T) {
	for id, want := range map[string]bool{
		"1.1": true, "123456789012.123456789012": true, "0.0": true,
		"": false, "1": false, "1.": false, ".1": false, "1.1.1": false, "a.1": false, "1.1 ": false,
		"-1.1": false, "1.1\x00": false, strings.Repeat("1", 20) + "." + strings.Repeat("1", 20): false,
	} {
		if got := validSocketID(id); got != want {
			t.Errorf("validSocketID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestPageBodyTooLarge(t *testing.T) {
	h := newHarness(t, nil)
	big := `{"protocol":1,"type":"changed","clientId":"a","rev":1,"pad":"` + strings.Repeat("x", 1<<20) + `"}`
	if rec := h.page("1.1", "c1", big); rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", rec.Code)
	}
	// Exactly 1 MiB is allowed through to the decoder (and rejected there as malformed).
	exact := `{"protocol":1,"type":"changed","clientId":"a","rev":1,"p":"`
	exact += strings.Repeat("x", 1<<20-len(exact)-2) + `"}`
	if rec := h.page("1.1", "c1", exact); rec.Code != http.StatusUnprocessableEntity {
		t.Fatalf("1 MiB body: status %d", rec.Code)
	}
}

func tool(name, llm, desc, hints, extra string) string {
	return `{"name":"` + name + `","llmName":"` + llm + `","description":"` + desc + `","hints":` + hints + extra + `}`
}

func TestPageUnprocessable(t *testing.T) {
	h := newHarness(t, nil)
	many := make([]string, MaxTools+1)
	for i := range many {
		many[i] = tool("t", "t", "d", "{}", "")
	}
	deep := strings.Repeat("[", 62) + strings.Repeat("]", 62)
	for _, tc := range []struct{ name, body string }{
		{"empty", ""},
		{"invalid JSON", `{"protocol":1,`},
		{"invalid UTF-8", "{\"protocol\":1,\"type\":\"changed\",\"clientId\":\"a\",\"rev\":1,\"x\":\"\xff\"}"},
		{"not object", `[1]`},
		{"too deep", `{"protocol":1,"type":"result","clientId":"a","id":"c1","result":{"status":"ok","data":` + "[" + deep + "]" + `}}`},
		{"protocol 2", `{"protocol":2,"type":"changed","clientId":"a","rev":1}`},
		{"protocol string", `{"protocol":"1","type":"changed","clientId":"a","rev":1}`},
		{"no protocol", `{"type":"changed","clientId":"a","rev":1}`},
		{"unknown type", `{"protocol":1,"type":"call","clientId":"a","id":"c","tool":"x","input":null}`},
		{"clientId pattern", `{"protocol":1,"type":"changed","clientId":"a.b","rev":1}`},
		{"clientId too long", `{"protocol":1,"type":"changed","clientId":"` + strings.Repeat("a", 129) + `","rev":1}`},
		{"id pattern", resultMsg(client1, "c/1", `{"status":"ok"}`)},
		{"confirmId pattern", confirmedMsg(client1, "", `{"status":"ok"}`)},
		{"result confirmId pattern", resultMsg(client1, "c1", `{"status":"needs_confirmation","confirmId":"a b","summary":"s"}`)},
		{"extra field", `{"protocol":1,"type":"changed","clientId":"a","rev":1,"x":1}`},
		{"rev fraction", `{"protocol":1,"type":"changed","clientId":"a","rev":1.5}`},
		{"rev string", `{"protocol":1,"type":"changed","clientId":"a","rev":"1"}`},
		{"result missing", `{"protocol":1,"type":"result","clientId":"a","id":"c1"}`},
		{"result status timeout", resultMsg(client1, "c1", `{"status":"timeout"}`)},
		{"too many tools", manifestMsg(client1, 1, strings.Join(many, ","))},
		{"description too long", manifestMsg(client1, 1, tool("t", "t", strings.Repeat("é", 1025), "{}", ""))},
		{"title too long", manifestMsg(client1, 1, tool("t", "t", "d", "{}", `,"title":"`+strings.Repeat("a", 1025)+`"`))},
		{"bad name", manifestMsg(client1, 1, tool("a b", "t", "d", "{}", ""))},
		{"bad llmName", manifestMsg(client1, 1, tool("t", "a.b", "d", "{}", ""))},
		{"llmName too long", manifestMsg(client1, 1, tool("t", strings.Repeat("a", 65), "d", "{}", ""))},
		{"hint not boolean", manifestMsg(client1, 1, tool("t", "t", "d", `{"destructive":1}`, ""))},
		{"hints missing", manifestMsg(client1, 1, `{"name":"t","llmName":"t","description":"d"}`)},
		{"unknown mode", manifestMsg(client1, 1, tool("t", "t", "d", "{}", `,"mode":"batch"`))},
		{"tools not array", `{"protocol":1,"type":"manifest","clientId":"a","rev":1,"tools":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if rec := h.page("1.1", "c1", tc.body); rec.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422 (%s)", rec.Code, rec.Body)
			}
		})
	}
	// Exactly MaxTools tools and 1024-character texts are fine.
	ok := make([]string, MaxTools)
	for i := range ok {
		ok[i] = tool("t", "t", strings.Repeat("é", 1024), "{}", `,"title":"`+strings.Repeat("a", 1024)+`"`)
	}
	if rec := h.page("1.1", "c1", manifestMsg(client1, 1, strings.Join(ok, ","))); rec.Code != 204 {
		t.Fatalf("limits inclusive: %d %s", rec.Code, rec.Body)
	}
	// 64 levels is allowed.
	body := `{"protocol":1,"type":"manifest","clientId":"a","rev":1,"tools":[` +
		tool("t", "t", "d", "{}", `,"x":`+strings.Repeat("[", 61)+strings.Repeat("]", 61)) + `]}`
	if rec := h.page("1.1", "c1", body); rec.Code != 204 {
		t.Fatalf("depth 64: %d %s", rec.Code, rec.Body)
	}
}

func TestManifestLifecycle(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	get := func() (int, Manifest) {
		rec := h.app(http.MethodGet, "/apps/app1/toolmark/manifest", "")
		var m Manifest
		_ = json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, m
	}
	// Only known fields and hints survive.
	rec := h.do(h.signedReq(context.Background(), http.MethodGet, "app1", "/apps/app1/toolmark/manifest",
		map[string][]string{"user_id": {"u1"}, "conversation_id": {"c1"}}, nil))
	want := `{"clientId":"` + client1 + `","rev":5,"tools":[{"name":"form.fill","llmName":"form__fill","description":"Fill","hints":{"readOnly":false,"consequential":true}},{"name":"form.submit","llmName":"form__submit","description":"Submit","hints":{},"title":"Submit","mode":"stepwise"}]}`
	if rec.Code != 200 || rec.Body.String() != want {
		t.Fatalf("manifest GET %d\n got %s\nwant %s", rec.Code, rec.Body, want)
	}
	if code, _ := get(); code != http.StatusUnprocessableEntity {
		t.Fatalf("manifest GET without ids: %d", code)
	}
	mget := func(user, conv string) (int, Manifest) {
		rec := h.do(h.signedReq(context.Background(), http.MethodGet, "app1", "/apps/app1/toolmark/manifest",
			map[string][]string{"user_id": {user}, "conversation_id": {conv}}, nil))
		var m Manifest
		_ = json.Unmarshal(rec.Body.Bytes(), &m)
		return rec.Code, m
	}
	if code, _ := mget("u1", "c9"); code != 404 {
		t.Fatalf("unknown conversation: %d", code)
	}
	steps := []struct {
		name, body string
		code       int
		client     string
		rev        int64
	}{
		{"lower rev ignored", manifestMsg(client1, 3, ""), 204, client1, 5},
		{"changed raises", `{"protocol":1,"type":"changed","clientId":"` + client1 + `","rev":8}`, 204, client1, 8},
		{"changed lower kept", `{"protocol":1,"type":"changed","clientId":"` + client1 + `","rev":2}`, 204, client1, 8},
		{"changed other client", `{"protocol":1,"type":"changed","clientId":"other","rev":9}`, 403, client1, 8},
		{"new client replaces", manifestMsg("tab2", 0, ""), 204, "tab2", 0},
		{"old client changed", `{"protocol":1,"type":"changed","clientId":"` + client1 + `","rev":9}`, 403, "tab2", 0},
	}
	for _, s := range steps {
		if rec := h.page("1.1", "c1", s.body); rec.Code != s.code {
			t.Fatalf("%s: %d %s", s.name, rec.Code, rec.Body)
		}
		if code, m := mget("u1", "c1"); code != 200 || m.ClientID != s.client || m.Rev != s.rev {
			t.Fatalf("%s: manifest %d %+v", s.name, code, m)
		}
	}
	// Manifests expire.
	h.clock.Add(25 * time.Hour)
	if code, _ := mget("u1", "c1"); code != 404 {
		t.Fatalf("manifest did not expire: %d", code)
	}
}

func TestCORSPreflight(t *testing.T) {
	h := newHarness(t, nil)
	for _, tc := range []struct {
		origin string
		want   int
	}{{"https://app.example.com", 204}, {"http://a.b.example.com:8080", 204}, {"https://evil.test", 403}, {"", 403}} {
		req := httptest.NewRequest(http.MethodOptions, prefix+"/toolmark/bridge/c1", nil)
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		req.Header.Set("Access-Control-Request-Method", "POST")
		rec := h.do(req)
		if rec.Code != tc.want {
			t.Fatalf("%q: %d", tc.origin, rec.Code)
		}
		if tc.want != 204 {
			if rec.Header().Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("%q: CORS headers on refusal", tc.origin)
			}
			continue
		}
		hd := rec.Header()
		if hd.Get("Access-Control-Allow-Origin") != tc.origin || hd.Get("Access-Control-Allow-Credentials") != "true" {
			t.Fatalf("headers %v", hd)
		}
		for _, want := range []string{"Content-Type", "Accept", "X-Requested-With", "X-Socket-ID", "X-Toolmark-Token", "X-CSRF-TOKEN", "X-XSRF-TOKEN", "Authorization"} {
			if !strings.Contains(hd.Get("Access-Control-Allow-Headers"), want) {
				t.Fatalf("allow headers %q lack %s", hd.Get("Access-Control-Allow-Headers"), want)
			}
		}
	}
	// "*" allows every origin.
	h.apps.AppByID("app1").AllowedOrigins = []string{"*"}
	req := httptest.NewRequest(http.MethodOptions, prefix+"/toolmark/bridge/c1", nil)
	req.Header.Set("Origin", "https://anything.test")
	if rec := h.do(req); rec.Code != 204 {
		t.Fatalf("wildcard: %d", rec.Code)
	}
}

// TestURLFormOrigins: allowed_origins written as URLs (the README's forms) match on the page
// endpoint exactly as on the WebSocket upgrade (package origin); they used to never match here.
func TestURLFormOrigins(t *testing.T) {
	for _, tc := range []struct {
		pattern, origin string
		want            int
	}{
		{"https://app.example.com", "https://app.example.com", 204},
		{"https://app.example.com", "http://app.example.com", 403},
		{"https://*.example.com", "https://a.example.com", 204},
		{"https://app.example.com:8443", "https://app.example.com:8443", 204},
		{"app.example.com:8443", "https://app.example.com", 403},
	} {
		h := newHarness(t, nil)
		h.apps.AppByID("app1").AllowedOrigins = []string{tc.pattern}
		pre := httptest.NewRequest(http.MethodOptions, prefix+"/toolmark/bridge/c1", nil)
		pre.Header.Set("Origin", tc.origin)
		pre.Header.Set("Access-Control-Request-Method", "POST")
		if rec := h.do(pre); rec.Code != tc.want {
			t.Errorf("preflight %q from %q: %d, want %d", tc.pattern, tc.origin, rec.Code, tc.want)
		}
		req := httptest.NewRequest(http.MethodPost, prefix+"/toolmark/bridge/c1", strings.NewReader(manifestMsg(client1, 1, "")))
		req.Header.Set("X-Socket-ID", "1.1")
		req.Header.Set("X-Toolmark-Token", pageToken("1.1"))
		req.Header.Set("Origin", tc.origin)
		if rec := h.do(req); rec.Code != tc.want {
			t.Errorf("POST %q from %q: %d, want %d (%s)", tc.pattern, tc.origin, rec.Code, tc.want, rec.Body)
		}
	}
}

func TestPageRateLimit(t *testing.T) {
	h := newHarness(t, nil) // defaults: burst 60, 10/s
	changed := `{"protocol":1,"type":"manifest","clientId":"a","rev":1,"tools":[]}`
	bad := `{"protocol":1,"type":"manifest","clientId":"a","rev":-1,"tools":[]}`
	// Rejected messages consume nothing: 100 malformed and 100 from a bad socket first.
	for i := 0; i < 100; i++ {
		if rec := h.page("1.1", "c1", bad); rec.Code != 422 {
			t.Fatalf("bad: %d", rec.Code)
		}
		if rec := h.page("1.1", "c1", `{"protocol":1,"type":"changed","clientId":"zzz","rev":1}`); rec.Code != 403 && rec.Code != 204 {
			t.Fatalf("changed from other client: %d", rec.Code)
		}
	}
	for i := 0; i < 60; i++ {
		if rec := h.page("1.1", "c1", changed); rec.Code != 204 {
			t.Fatalf("burst message %d: %d", i, rec.Code)
		}
	}
	if rec := h.page("1.1", "c1", changed); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("61st: %d", rec.Code)
	}
	// Another socket has its own bucket.
	if rec := h.page("6.1", "c2", changed); rec.Code != 204 {
		t.Fatalf("other socket: %d", rec.Code)
	}
	// 600 per minute sustained.
	for i := 0; i < 600; i++ {
		h.clock.Add(100 * time.Millisecond)
		if rec := h.page("1.1", "c1", changed); rec.Code != 204 {
			t.Fatalf("sustained message %d: %d", i, rec.Code)
		}
	}
}
