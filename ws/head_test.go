package ws

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
)

const goodHead = "GET /app/app-key?protocol=7&client=js&version=8.4.0 HTTP/1.1\r\n" +
	"Host: 127.0.0.1:6001\r\n" +
	"User-Agent: Go-http-client/1.1\r\n" +
	"Connection: Upgrade\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"Upgrade: websocket\r\n" +
	"\r\n"

// parseHead parses with the route the tests use, {mount}/app/{name} (a Pusher-shaped path;
// the parser itself takes any prefix).
func parseHead(b []byte, mount string) (upgradeHead, headResult) {
	return parseUpgradeHead(b, mount+"/app/")
}

func TestParseUpgradeHead(t *testing.T) {
	repl := func(old, new string) string { return strings.Replace(goodHead, old, new, 1) }
	cases := []struct {
		name, head, prefix string
		want               headResult
	}{
		{"good", goodHead, "", headUpgrade},
		{"prefix", repl("GET /app/", "GET /reverb/app/"), "/reverb", headUpgrade},
		{"prefix missing", goodHead, "/reverb", headOther},
		{"no query", repl("?protocol=7&client=js&version=8.4.0", ""), "", headUpgrade},
		{"lower-case names, token lists", repl("Connection: Upgrade", "connection: keep-alive, Upgrade"), "", headUpgrade},
		{"deflate offer ignored", repl("\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"), "", headUpgrade},
		{"origin", repl("\r\n\r\n", "\r\nOrigin: https://example.com\r\n\r\n"), "", headUpgrade},
		{"incomplete", goodHead[:len(goodHead)-2], "", headIncomplete},
		{"request line only", "GET /app/k", "", headIncomplete},
		{"POST", repl("GET ", "POST "), "", headOther},
		{"api", "GET /apps/1/channels HTTP/1.1\r\nHost: x\r\n\r\n", "", headOther},
		{"up", "GET /up HTTP/1.1\r\nHost: x\r\n\r\n", "", headOther},
		{"HTTP/1.0", repl("HTTP/1.1", "HTTP/1.0"), "", headOther},
		{"escaped key", repl("app-key", "app%2Dkey"), "", headOther},
		{"empty key", repl("/app/app-key", "/app/"), "", headOther},
		{"key with slash", repl("app-key", "app/key"), "", headOther},
		{"absolute form", repl("GET /app/", "GET http://h/app/"), "", headOther},
		{"pipelined", goodHead + "\x81\x80", "", headOther},
		{"bare LF", strings.ReplaceAll(goodHead, "\r\n", "\n"), "", headOther},
		{"bare LF partial", "GET /app/k HTTP/1.1\nHost: x\n", "", headOther},
		{"no upgrade", repl("Upgrade: websocket\r\n", ""), "", headOther},
		{"upgrade h2c", repl("Upgrade: websocket", "Upgrade: h2c"), "", headOther},
		{"no connection upgrade", repl("Connection: Upgrade", "Connection: keep-alive"), "", headOther},
		{"gorilla token rule", repl("Connection: Upgrade", "Connection: foo bar, Upgrade"), "", headOther},
		{"version 8", repl("Version: 13", "Version: 8"), "", headOther},
		{"no key", repl("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""), "", headOther},
		{"short key", repl("dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZQ=="), "", headOther},
		{"bad base64 key", repl("dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZ!="), "", headOther},
		{"no host", repl("Host: 127.0.0.1:6001\r\n", ""), "", headOther},
		{"two hosts", repl("Host: 127.0.0.1:6001\r\n", "Host: a\r\nHost: b\r\n"), "", headOther},
		{"two keys", repl("Upgrade: websocket\r\n", "Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), "", headOther},
		{"two origins", repl("\r\n\r\n", "\r\nOrigin: a\r\nOrigin: b\r\n\r\n"), "", headOther},
		{"body", repl("\r\n\r\n", "\r\nContent-Length: 0\r\n\r\n"), "", headOther},
		{"chunked", repl("\r\n\r\n", "\r\nTransfer-Encoding: chunked\r\n\r\n"), "", headOther},
		{"folded", repl("Upgrade: websocket\r\n", "Upgrade:\r\n websocket\r\n"), "", headOther},
		{"space before colon", repl("Upgrade: websocket", "Upgrade : websocket"), "", headOther},
		{"control in value", repl("Go-http-client/1.1", "Go\x01"), "", headOther},
		{"odd host", repl("127.0.0.1:6001", "a b"), "", headOther},
		{"fragment in query", repl("protocol=7", "protocol=7#x"), "", headOther},
		{"oversize", strings.Replace(goodHead, "\r\n\r\n", "\r\nX-Pad: "+strings.Repeat("a", maxUpgradeHead)+"\r\n\r\n", 1), "", headOther},
		{"oversize incomplete", "GET /app/k HTTP/1.1\r\nX: " + strings.Repeat("a", maxUpgradeHead), "", headOther},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, got := parseHead([]byte(tc.head), tc.prefix)
			if got != tc.want {
				t.Fatalf("result %d, want %d", got, tc.want)
			}
			if got == headUpgrade {
				checkAgainstNetHTTP(t, []byte(tc.head), tc.prefix, h)
			}
		})
	}
}

// TestParseUpgradeHeadSplit feeds the head in every two-piece split: no prefix of an
// upgrade is taken for a whole one, and the whole is recognised however it arrived.
func TestParseUpgradeHeadSplit(t *testing.T) {
	for i := 0; i < len(goodHead); i++ {
		if _, res := parseHead([]byte(goodHead[:i]), ""); res != headIncomplete {
			t.Fatalf("prefix of %d bytes: result %d, want incomplete", i, res)
		}
	}
	h, res := parseHead([]byte(goodHead), "")
	if res != headUpgrade || string(h.Name) != "app-key" || string(h.Query) != "protocol=7&client=js&version=8.4.0" ||
		string(h.Key) != "dGhlIHNhbXBsZSBub25jZQ==" || h.Origin != nil {
		t.Fatalf("parsed %+v (%d)", h, res)
	}
}

func TestAcceptKey(t *testing.T) {
	// RFC 6455 §1.3's example.
	if got := string(appendAcceptKey(nil, []byte("dGhlIHNhbXBsZSBub25jZQ=="))); got != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("accept key %q", got)
	}
}

// checkAgainstNetHTTP asserts that net/http parses an accepted head into the same request
// gorilla would upgrade: GET, the route's path, the same key, query and Origin.
func checkAgainstNetHTTP(t *testing.T, head []byte, prefix string, h upgradeHead) {
	t.Helper()
	r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(head)))
	if err != nil {
		t.Fatalf("fast path took a head net/http rejects: %v\n%q", err, head)
	}
	if r.Method != http.MethodGet || r.URL.Path != prefix+"/app/"+string(h.Name) || r.URL.RawPath != "" {
		t.Fatalf("net/http sees %s %q (raw %q), fast path key %q", r.Method, r.URL.Path, r.URL.RawPath, h.Name)
	}
	if r.URL.RawQuery != string(h.Query) || r.Header.Get("Origin") != string(h.Origin) ||
		r.Header.Get("Sec-Websocket-Key") != string(h.Key) {
		t.Fatalf("net/http sees query %q origin %q key %q; fast path %q %q %q", r.URL.RawQuery,
			r.Header.Get("Origin"), r.Header.Get("Sec-Websocket-Key"), h.Query, h.Origin, h.Key)
	}
	if !websocket.IsWebSocketUpgrade(r) || r.Host == "" && len(r.Header["Host"]) != 0 {
		t.Fatalf("gorilla would not see an upgrade")
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) != 0 {
		t.Fatalf("a body")
	}
}

func FuzzUpgradeHead(f *testing.F) {
	f.Add([]byte(goodHead), "")
	f.Add([]byte(strings.Replace(goodHead, "GET /app/", "GET /r/app/", 1)), "/r")
	f.Add([]byte(strings.Replace(goodHead, "Connection: Upgrade", "Connection: keep-alive,upgrade", 1)), "")
	f.Add([]byte("GET /app/k HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\nOrigin: http://x\r\n\r\n"), "")
	f.Add([]byte("GET /up HTTP/1.1\r\nHost: h\r\n\r\n"), "")
	f.Add([]byte("POST /apps/1/events HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"), "")
	f.Fuzz(func(t *testing.T, head []byte, prefix string) {
		for _, c := range []byte(prefix) { // config.normalizePath's output: "" or "/a/b"
			if c != '/' && !isUnreserved(c) {
				return
			}
		}
		h, res := parseHead(head, prefix)
		if res != headUpgrade {
			return
		}
		checkAgainstNetHTTP(t, head, prefix, h)
		if len(head) > maxUpgradeHead {
			t.Fatalf("accepted %d bytes", len(head))
		}
		// No proper prefix of an accepted head is complete.
		for _, n := range []int{0, len(head) / 2, len(head) - 1} {
			if _, r := parseHead(head[:n], prefix); r == headUpgrade {
				t.Fatalf("prefix of %d bytes accepted", n)
			}
		}
	})
}
