package httpguard

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// Clients tells which client a request comes from: its peer address, or, when the peer is
// one of the trusted proxies, the address its X-Forwarded-For names. The nil *Clients
// trusts no proxy.
type Clients struct {
	trusted []netip.Prefix
}

// NewClients parses trusted proxies: IP addresses ("10.0.0.7", "::1") or CIDR prefixes
// ("10.0.0.0/8").
func NewClients(trusted []string) (*Clients, error) {
	c := &Clients{}
	for _, s := range trusted {
		p, err := ParseProxy(s)
		if err != nil {
			return nil, err
		}
		c.trusted = append(c.trusted, p)
	}
	return c, nil
}

// ParseProxy parses one trusted_proxies entry: an IP address or a CIDR prefix.
func ParseProxy(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("not an IP address or CIDR prefix: %q", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("not an IP address or CIDR prefix: %q", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (c *Clients) isTrusted(a netip.Addr) bool {
	if c == nil {
		return false
	}
	for _, p := range c.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Addr is the request's client address. Behind trusted proxies it walks X-Forwarded-For from
// its last hop (the one the peer added) towards the first, past every hop that is itself a
// trusted proxy: for a chain of trusted proxies that is the first hop, the client, and a
// client cannot choose its address by sending its own X-Forwarded-For (the hop its first
// proxy appended is the one used). The zero Addr stands for a peer address that does not
// parse (every such request counts as one client).
func (c *Clients) Addr(r *http.Request) netip.Addr {
	peer := parseHop(r.RemoteAddr)
	if !c.isTrusted(peer) {
		return peer
	}
	client := peer
	vals := r.Header.Values("X-Forwarded-For")
	for i := len(vals) - 1; i >= 0; i-- {
		v := vals[i]
		for v != "" {
			hop := v
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = v[j+1:], v[:j]
			} else {
				v = ""
			}
			a := parseHop(strings.TrimSpace(hop))
			if !a.IsValid() {
				return client // a malformed hop: trust nothing further left
			}
			client = a
			if !c.isTrusted(a) {
				return a
			}
		}
	}
	return client
}

// Key is the bucket a client's address counts in: the address itself for IPv4, its /64 for
// IPv6 (one host is usually given a whole /64).
func Key(a netip.Addr) netip.Addr {
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}

// parseHop parses "ip", "ip:port", "[ipv6]" or "[ipv6]:port"; invalid gives the zero Addr.
func parseHop(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap()
	}
	return netip.Addr{}
}
