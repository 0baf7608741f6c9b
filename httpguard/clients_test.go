package httpguard

import (
	"net/http"
	"net/netip"
	"testing"
)

func TestClientsAddr(t *testing.T) {
	trusted, err := NewClients([]string{"127.0.0.1", "10.0.0.0/8", "::1"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		clients *Clients
		peer    string
		xff     []string
		want    string
	}{
		{"no proxy trusted: the peer", nil, "127.0.0.1:5000", []string{"1.2.3.4"}, "127.0.0.1"},
		{"untrusted peer: its XFF is ignored", trusted, "192.0.2.9:5000", []string{"1.2.3.4"}, "192.0.2.9"},
		{"trusted peer without XFF", trusted, "127.0.0.1:5000", nil, "127.0.0.1"},
		{"trusted peer: the hop it added", trusted, "127.0.0.1:5000", []string{"1.2.3.4"}, "1.2.3.4"},
		{"a chain of trusted proxies: the first hop", trusted, "127.0.0.1:5000", []string{"1.2.3.4, 10.1.1.1"}, "1.2.3.4"},
		{"a spoofed first hop: the one the proxy appended", trusted, "127.0.0.1:5000", []string{"6.6.6.6, 1.2.3.4"}, "1.2.3.4"},
		{"two header lines", trusted, "127.0.0.1:5000", []string{"1.2.3.4", "10.1.1.1"}, "1.2.3.4"},
		{"a malformed hop stops the walk", trusted, "127.0.0.1:5000", []string{"1.2.3.4, bogus, 10.1.1.1"}, "10.1.1.1"},
		{"hop with a port", trusted, "127.0.0.1:5000", []string{"1.2.3.4:999"}, "1.2.3.4"},
		{"IPv6 peer and hop", trusted, "[::1]:5000", []string{"[2001:db8::1]"}, "2001:db8::1"},
		{"IPv4-mapped peer", trusted, "[::ffff:127.0.0.1]:5000", []string{"1.2.3.4"}, "1.2.3.4"},
		{"only trusted hops: the first", trusted, "127.0.0.1:5000", []string{"10.2.2.2, 10.1.1.1"}, "10.2.2.2"},
		{"unparsable peer", trusted, "pipe", []string{"1.2.3.4"}, "invalid IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tt.peer, Header: http.Header{}}
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if got := tt.clients.Addr(r).String(); got != tt.want {
				t.Fatalf("Addr = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestKeyGroupsIPv6By64(t *testing.T) {
	a, b := netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("2001:db8:1:2:ffff::9")
	if Key(a) != Key(b) {
		t.Fatalf("one /64, two keys: %v %v", Key(a), Key(b))
	}
	if Key(a) == Key(netip.MustParseAddr("2001:db8:1:3::1")) {
		t.Fatal("two /64s, one key")
	}
	if v4 := netip.MustParseAddr("192.0.2.1"); Key(v4) != v4 {
		t.Fatalf("IPv4 key %v", Key(v4))
	}
}

func TestParseProxy(t *testing.T) {
	for _, bad := range []string{"", "10.0.0.0/33", "host.example", "1.2.3"} {
		if _, err := ParseProxy(bad); err == nil {
			t.Errorf("ParseProxy(%q) accepted", bad)
		}
	}
	if p, err := ParseProxy(" 10.1.2.3/8 "); err != nil || p.String() != "10.0.0.0/8" {
		t.Fatalf("ParseProxy = %v %v", p, err)
	}
}
