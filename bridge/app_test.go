package bridge

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/reverbgo/reverbgo/auth"
	"github.com/reverbgo/reverbgo/internal/testutil"
)

const callBody = `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":{"title":"x"},"rev":5,"tool_use_id":"toolu_1"}`

func TestAppAuth(t *testing.T) {
	h := newHarness(t, nil)
	body := []byte(callBody)
	for _, tc := range []struct {
		name string
		req  func() *http.Request
		want int
	}{
		{"unknown app", func() *http.Request {
			return h.signedReq(context.Background(), "POST", "nope", "/apps/nope/toolmark/calls", nil, body)
		}, 404},
		{"bad signature", func() *http.Request {
			r := h.signedReq(context.Background(), "POST", "app1", "/apps/app1/toolmark/calls", nil, body)
			q := r.URL.Query()
			q.Set("auth_signature", strings.Repeat("0", 64))
			r.URL.RawQuery = q.Encode()
			return r
		}, 401},
		{"signed with prefix", func() *http.Request {
			q := auth.SignRequest("POST", prefix+"/apps/app1/toolmark/calls", nil, body, "key1", "secret1", h.clock.Now())
			r := h.signedReq(context.Background(), "POST", "app1", "/apps/app1/toolmark/calls", nil, body)
			r.URL.RawQuery = q.Encode()
			return r
		}, 401},
		{"body tampered", func() *http.Request {
			r := h.signedReq(context.Background(), "POST", "app1", "/apps/app1/toolmark/calls", nil, body)
			r.Body = http.NoBody
			return r
		}, 401},
		{"disabled", func() *http.Request {
			return h.signedReq(context.Background(), "POST", "app2", "/apps/app2/toolmark/calls", nil, body)
		}, 403},
		{"too large", func() *http.Request {
			return h.signedReq(context.Background(), "POST", "app1", "/apps/app1/toolmark/messages", nil,
				[]byte(`{"x":"`+strings.Repeat("a", 1<<20)+`"}`))
		}, 413},
		{"manifest disabled", func() *http.Request {
			return h.signedReq(context.Background(), "GET", "app2", "/apps/app2/toolmark/manifest",
				url.Values{"user_id": {"u1"}, "conversation_id": {"c1"}}, nil)
		}, 403},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := h.do(tc.req())
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d (%s)", rec.Code, tc.want, rec.Body)
			}
			var e map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e["error"] == "" || len(e) != 1 {
				t.Fatalf("body %s is not {\"error\":...}", rec.Body)
			}
		})
	}
}

func TestCallRequestUnprocessable(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	deep := strings.Repeat("[", 64) + strings.Repeat("]", 64)
	for _, tc := range []struct{ name, kind, body string }{
		{"not JSON", "calls", `{`},
		{"not object", "calls", `[]`},
		{"missing user_id", "calls", `{"conversation_id":"c1","tool":"t"}`},
		{"missing conversation_id", "calls", `{"user_id":"u1","tool":"t"}`},
		{"missing tool", "calls", `{"user_id":"u1","conversation_id":"c1"}`},
		{"numeric user_id", "calls", `{"user_id":1,"conversation_id":"c1","tool":"t"}`},
		{"dot in user_id", "calls", `{"user_id":"u.1","conversation_id":"c1","tool":"t"}`},
		{"empty conversation", "calls", `{"user_id":"u1","conversation_id":"","tool":"t"}`},
		{"long conversation", "calls", `{"user_id":"u1","conversation_id":"` + strings.Repeat("c", 129) + `","tool":"t"}`},
		{"bad tool", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"a b"}`},
		{"timeout zero", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","timeout_ms":0}`},
		{"timeout over max", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","timeout_ms":600001}`},
		{"timeout fraction", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","timeout_ms":1.5}`},
		{"rev negative", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","rev":-1}`},
		{"rev string", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","rev":"1"}`},
		{"tool_use_id number", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","tool_use_id":5}`},
		{"input too deep", "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","input":` + deep + `}`},
		{"describe missing tool", "describe", `{"user_id":"u1","conversation_id":"c1"}`},
		{"messages missing message", "messages", `{"user_id":"u1","conversation_id":"c1"}`},
		{"messages bad user", "messages", `{"user_id":"","conversation_id":"c1","message":{}}`},
		{"messages invalid message", "messages", `{"user_id":"u1","conversation_id":"c1","message":{"protocol":1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := h.app("POST", "/apps/app1/toolmark/"+tc.kind, tc.body)
			if rec.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422 (%s)", rec.Code, rec.Body)
			}
			var e map[string]string
			if json.Unmarshal(rec.Body.Bytes(), &e) != nil || e["error"] == "" {
				t.Fatalf("body %s", rec.Body)
			}
		})
	}
	if n := len(h.pub.all()); n != 0 {
		t.Fatalf("%d broadcasts for rejected requests", n)
	}
}

func keysOf(t *testing.T, raw string) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range []string{"id", "result", "hints"} {
		if _, ok := m[k]; ok {
			keys = append(keys, k)
		}
	}
	if len(keys) != len(m) {
		t.Fatalf("unexpected keys in %s", raw)
	}
	return keys
}

func TestCallRoundTrip(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	ch := h.startCall(context.Background(), "calls", callBody)
	m := h.pub.waitMsg(t, "call", "")
	p := h.pub.all()[0]
	if p.App != "app1" || p.Channel != "private-toolmark.u1.c1" || p.Event != "toolmark.message" {
		t.Fatalf("published %+v", p)
	}
	if u, err := uuid.Parse(m.ID); err != nil || u.Version() != 4 {
		t.Fatalf("id %q is not a UUID v4", m.ID)
	}
	if m.ClientID != client1 || m.Tool != "form.fill" || m.Rev == nil || *m.Rev != 5 || string(m.Input) != `{"title":"x"}` {
		t.Fatalf("call %+v", m)
	}
	if rec := h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok","data":{"a":[1, 2]}}`)); rec.Code != 204 {
		t.Fatalf("result: %d %s", rec.Code, rec.Body)
	}
	r := recv(t, ch)
	if r.Code != 200 || r.ID != m.ID || string(r.Result) != `{"data":{"a":[1,2]},"status":"ok"}` ||
		string(r.Hints) != `{"readOnly":false,"consequential":true}` {
		t.Fatalf("agent got %+v", r)
	}
	if got := keysOf(t, r.Raw); len(got) != 3 {
		t.Fatalf("keys %v", got)
	}
	// The call is over: a second result is a duplicate.
	if rec := h.page("1.1", "c1", resultMsg(client1, m.ID, `{"status":"ok"}`)); rec.Code != 409 {
		t.Fatalf("duplicate: %d", rec.Code)
	}
}

func TestCallWithoutPage(t *testing.T) {
	h := newHarness(t, nil)
	r := recv(t, h.startCall(context.Background(), "calls", callBody))
	if r.Code != 200 || string(r.Result) != `{"message":"No page is connected","status":"error"}` || string(r.Hints) != `{}` || r.ID == "" {
		t.Fatalf("got %+v", r)
	}
	if len(h.pub.all()) != 0 {
		t.Fatal("broadcast without a page")
	}
}

// A stored manifest outlives the tab: once no socket is subscribed to the conversation's
// channel, calls fail at once instead of waiting for their deadline.
func TestCallAfterPageLeft(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	h.sockets.RemoveApp("app1")
	r := recv(t, h.startCall(context.Background(), "calls", callBody))
	if r.Code != 200 || string(r.Result) != `{"message":"No page is connected","status":"error"}` {
		t.Fatalf("got %+v", r)
	}
	if len(h.pub.all()) != 0 {
		t.Fatal("broadcast without a page")
	}
}

func TestCallTooLargeForApp(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	body := `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":"` + strings.Repeat("a", 10000) + `"}`
	r := recv(t, h.startCall(context.Background(), "calls", body))
	var res map[string]string
	_ = json.Unmarshal(r.Result, &res)
	if r.Code != 200 || res["status"] != "error" || !strings.Contains(res["message"], "max_message_size") || !strings.Contains(string(r.Hints), "consequential") {
		t.Fatalf("got %+v", r)
	}
	if len(h.pub.all()) != 0 {
		t.Fatal("oversized call broadcast")
	}
}

func TestCallTimeoutSendsCancel(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	ch := h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c1","tool":"form.submit","input":null,"timeout_ms":30}`)
	call := h.pub.waitMsg(t, "call", "")
	r := recv(t, ch)
	if string(r.Result) != `{"status":"timeout"}` || r.ID != call.ID || string(r.Hints) != `{}` {
		t.Fatalf("got %+v", r)
	}
	cancel := h.pub.waitMsg(t, "cancel", call.ID)
	if cancel.ClientID != client1 {
		t.Fatalf("cancel %+v", cancel)
	}
	if rec := h.page("1.1", "c1", resultMsg(client1, call.ID, `{"status":"ok"}`)); rec.Code != 409 {
		t.Fatalf("result after timeout claim: %d", rec.Code)
	}
	h.clock.Add(time.Hour)
	if rec := h.page("1.1", "c1", resultMsg(client1, call.ID, `{"status":"ok"}`)); rec.Code != 404 {
		t.Fatalf("result after binding expiry: %d", rec.Code)
	}
}

func TestResultAfterDeadlineBeforeClaim(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	ctx, cancel := context.WithCancel(context.Background())
	ch := h.startCall(ctx, "calls", `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":{},"timeout_ms":1000}`)
	call := h.pub.waitMsg(t, "call", "")
	h.clock.Add(2 * time.Second) // past the deadline by the bridge's clock; the waiter's timer has not fired
	if rec := h.page("1.1", "c1", resultMsg(client1, call.ID, `{"status":"ok"}`)); rec.Code != 410 {
		t.Fatalf("late result: %d %s", rec.Code, rec.Body)
	}
	cancel() // the agent goes away: treated like a timeout
	r := recv(t, ch)
	if string(r.Result) != `{"status":"timeout"}` {
		t.Fatalf("got %+v", r)
	}
	h.pub.waitMsg(t, "cancel", call.ID)
	if rec := h.page("1.1", "c1", resultMsg(client1, call.ID, `{"status":"ok"}`)); rec.Code != 409 {
		t.Fatalf("result after claim: %d", rec.Code)
	}
}

func TestResultBindingChecks(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	// u2 has its own page on c1.
	if rec := h.page("5.1", "c1", manifestMsg("u2tab", 1, "")); rec.Code != 204 {
		t.Fatal(rec.Code)
	}
	ch := h.startCall(context.Background(), "calls", callBody)
	call := h.pub.waitMsg(t, "call", "")
	for _, tc := range []struct {
		name, sid, conv, body string
		want                  int
	}{
		{"unknown id", "1.1", "c1", resultMsg(client1, "nope", `{"status":"ok"}`), 404},
		{"other user", "5.1", "c1", resultMsg(client1, call.ID, `{"status":"ok"}`), 403},
		{"other conversation", "6.1", "c2", resultMsg(client1, call.ID, `{"status":"ok"}`), 403},
		{"other clientId", "1.1", "c1", resultMsg("tab2", call.ID, `{"status":"ok"}`), 403},
		{"via messages, other user", "", "", `{"user_id":"u2","conversation_id":"c1","message":` + resultMsg(client1, call.ID, `{"status":"ok"}`) + `}`, 403},
		{"accepted", "1.1", "c1", resultMsg(client1, call.ID, `{"status":"refused","code":"stale","message":"Stale","rev":9}`), 204},
	} {
		var code int
		if tc.sid == "" {
			code = h.app("POST", "/apps/app1/toolmark/messages", tc.body).Code
		} else {
			code = h.page(tc.sid, tc.conv, tc.body).Code
		}
		if code != tc.want {
			t.Fatalf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
	if r := recv(t, ch); string(r.Result) != `{"code":"stale","message":"Stale","rev":9,"status":"refused"}` {
		t.Fatalf("got %+v", r)
	}
}

func TestNewClientTakesNewCalls(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	first := h.startCall(context.Background(), "calls", callBody)
	c1 := h.pub.waitMsg(t, "call", "")
	h.withManifest("tab2", 0) // reload
	second := h.startCall(context.Background(), "calls", callBody)
	c2 := h.pub.waitOther(t, "call", c1.ID)
	if c1.ClientID != client1 || c2.ClientID != "tab2" {
		t.Fatalf("clientIds %q %q", c1.ClientID, c2.ClientID)
	}
	if code := h.page("1.1", "c1", resultMsg(client1, c2.ID, `{"status":"ok"}`)).Code; code != 403 {
		t.Fatalf("old tab answering new call: %d", code)
	}
	if code := h.page("1.1", "c1", resultMsg(client1, c1.ID, `{"status":"ok"}`)).Code; code != 204 {
		t.Fatalf("old tab answering its call: %d", code)
	}
	if code := h.page("1.1", "c1", resultMsg("tab2", c2.ID, `{"status":"ok"}`)).Code; code != 204 {
		t.Fatalf("new tab answering its call: %d", code)
	}
	recv(t, first)
	recv(t, second)
}

func TestConfirmationFlow(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	needs := func(confirmID string) string {
		return `{"status":"needs_confirmation","confirmId":"` + confirmID + `","summary":"Submit","changes":[{"path":"title","before":"","after":"x"}]}`
	}
	// A describe cannot be answered with needs_confirmation.
	dch := h.startCall(context.Background(), "describe", `{"user_id":"u1","conversation_id":"c1","tool":"form.submit"}`)
	d := h.pub.waitMsg(t, "describe", "")
	if d.Tool != "form.submit" || d.Input != nil {
		t.Fatalf("describe %+v", d)
	}
	if code := h.page("1.1", "c1", resultMsg(client1, d.ID, needs("f1"))).Code; code != 422 {
		t.Fatalf("needs_confirmation for describe: %d", code)
	}
	if code := h.page("1.1", "c1", resultMsg(client1, d.ID, `{"status":"ok","data":{"schema":{}}}`)).Code; code != 204 {
		t.Fatalf("describe result: %d", code)
	}
	if r := recv(t, dch); string(r.Result) != `{"data":{"schema":{}},"status":"ok"}` || string(r.Hints) != `{}` {
		t.Fatalf("describe got %+v", r)
	}

	ch := h.startCall(context.Background(), "calls", callBody)
	call := h.pub.waitMsg(t, "call", "")
	if code := h.page("1.1", "c1", resultMsg(client1, call.ID, needs("f1"))).Code; code != 204 {
		t.Fatalf("needs_confirmation: %d", code)
	}
	recv(t, ch)
	// Another call cannot rebind f1, and its claim is not consumed by trying.
	ch2 := h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":1}`)
	call2 := h.pub.waitOther(t, "call", call.ID)
	if code := h.page("1.1", "c1", resultMsg(client1, call2.ID, needs("f1"))).Code; code != 409 {
		t.Fatalf("rebinding confirmId: %d", code)
	}
	if code := h.page("1.1", "c1", resultMsg(client1, call2.ID, needs("f2"))).Code; code != 204 {
		t.Fatalf("second confirmation: %d", code)
	}
	recv(t, ch2)

	for _, tc := range []struct {
		name, sid, conv, body string
		want                  int
	}{
		{"unknown", "1.1", "c1", confirmedMsg(client1, "f9", `{"status":"ok"}`), 404},
		{"other clientId", "1.1", "c1", confirmedMsg("tab2", "f1", `{"status":"ok"}`), 403},
		// ConfirmIds are namespaced by app: a known one from another user's or conversation's
		// socket is a binding mismatch (403, toolmark-bridge.md §6), not an unknown id.
		{"other user", "5.1", "c1", confirmedMsg(client1, "f1", `{"status":"ok"}`), 403},
		{"other conversation", "6.1", "c2", confirmedMsg(client1, "f1", `{"status":"ok"}`), 403},
		{"invalid result", "1.1", "c1", confirmedMsg(client1, "f1", `{"status":"cancelled","by":"agent"}`), 422},
		{"accepted", "1.1", "c1", confirmedMsg(client1, "f1", `{"status":"ok","data":1}`), 204},
		{"duplicate", "1.1", "c1", confirmedMsg(client1, "f1", `{"status":"ok","data":1}`), 409},
	} {
		if code := h.page(tc.sid, tc.conv, tc.body).Code; code != tc.want {
			t.Fatalf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
	ev := h.hooks.All()
	if len(ev) != 1 || ev[0].App != "app1" {
		t.Fatalf("webhooks %v", ev)
	}
	got, _ := json.Marshal(ev[0].Event)
	want := `{"call_id":"` + call.ID + `","confirm_id":"f1","conversation_id":"c1","name":"toolmark_confirmed","result":{"data":1,"status":"ok"},"tool_use_id":"toolu_1","user_id":"u1"}`
	if string(got) != want {
		t.Fatalf("webhook\n got %s\nwant %s", got, want)
	}
	// The confirmation expires after 660 s.
	h.clock.Add(661 * time.Second)
	if code := h.page("1.1", "c1", confirmedMsg(client1, "f2", `{"status":"ok"}`)).Code; code != 404 {
		t.Fatalf("expired confirmation: %d", code)
	}
}

func TestMessagesEndpoint(t *testing.T) {
	h := newHarness(t, nil)
	wrap := func(user, msg string) string {
		return `{"user_id":"` + user + `","conversation_id":"c1","message":` + msg + `}`
	}
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"manifest", wrap("u1", manifestMsg(client1, 1, toolsJSON)), 204},
		{"changed", wrap("u1", `{"protocol":1,"type":"changed","clientId":"`+client1+`","rev":2}`), 204},
		{"changed other", wrap("u1", `{"protocol":1,"type":"changed","clientId":"x","rev":2}`), 403},
		{"unknown id", wrap("u1", resultMsg(client1, "c1", `{"status":"ok"}`)), 404},
		{"invalid", wrap("u1", `{"protocol":2}`), 422},
		{"deep message", wrap("u1", `{"protocol":1,"type":"changed","clientId":"x","rev":2,"x":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)+`}`), 422},
	} {
		rec := h.app("POST", "/apps/app1/toolmark/messages", tc.body)
		if rec.Code != tc.want {
			t.Fatalf("%s: %d, want %d (%s)", tc.name, rec.Code, tc.want, rec.Body)
		}
	}
	// The manifest the app forwarded is the one calls go to.
	r := recv(t, h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","timeout_ms":1}`))
	if r.Code != 200 || string(r.Hints) != `{"readOnly":false,"consequential":true}` {
		t.Fatalf("got %+v", r)
	}
}

func TestInFlightLimit(t *testing.T) {
	h := newHarness(t, nil) // defaults: 100 in flight
	h.withManifest(client1, 5)
	ctx, cancel := context.WithCancel(context.Background())
	chans := make([]<-chan callResp, 100)
	for i := range chans {
		chans[i] = h.startCall(ctx, "calls", callBody)
	}
	testutil.WaitFor(t, "100 calls published", func() bool { return len(h.pub.all()) >= 100 })
	r := recv(t, h.startCall(context.Background(), "calls", callBody))
	if r.Code != http.StatusTooManyRequests || r.Error != "Too many calls in flight" {
		t.Fatalf("101st: %+v", r)
	}
	// Other conversations are unaffected.
	if r := recv(t, h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c2","tool":"t"}`)); r.Code != 200 {
		t.Fatalf("other conversation: %+v", r)
	}
	cancel()
	for _, ch := range chans {
		if r := recv(t, ch); string(r.Result) != `{"status":"timeout"}` {
			t.Fatalf("got %+v", r)
		}
	}
	if r := recv(t, h.startCall(context.Background(), "calls", `{"user_id":"u1","conversation_id":"c1","tool":"t","timeout_ms":1}`)); r.Code != 200 {
		t.Fatalf("after release: %+v", r)
	}
}

// TestCallRateLimit: calls that pass resolve, authorize and validate take from the bucket; a
// call refused before (no page, here) does not.
func TestCallRateLimit(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Limits.CallBurst = 2 })
	recv(t, h.startCall(context.Background(), "calls", callBody)) // no page: takes nothing
	h.withManifest(client1, 1)
	body := `{"user_id":"u1","conversation_id":"c1","tool":"form.fill","timeout_ms":1}`
	for i, want := range []int{200, 200, 429} {
		r := recv(t, h.startCall(context.Background(), "calls", body))
		if r.Code != want {
			t.Fatalf("call %d: %+v", i, r)
		}
	}
}

func TestPublishFailure(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	h.pub.fail = true
	r := recv(t, h.startCall(context.Background(), "calls", callBody))
	if !strings.Contains(string(r.Result), `"status":"error"`) {
		t.Fatalf("got %+v", r)
	}
}

func TestCloseSettlesWaiters(t *testing.T) {
	h := newHarness(t, nil)
	h.withManifest(client1, 5)
	ch := h.startCall(context.Background(), "calls", callBody)
	call := h.pub.waitMsg(t, "call", "")
	h.b.Close()
	if r := recv(t, ch); string(r.Result) != `{"status":"timeout"}` {
		t.Fatalf("got %+v", r)
	}
	h.pub.waitMsg(t, "cancel", call.ID)
}
