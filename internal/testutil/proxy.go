package testutil

import (
	"bytes"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a real server (Redis), for faults no
// real server makes on demand: commands injected into a client's connection as if the
// client had sent them (a server-sent unsubscribe is Redis answering an UNSUBSCRIBE the
// client never sent), connections that silently stop delivering (a subscription left on
// a demoted master answers nothing the cluster publishes), and connections cut in the
// middle of what the client is sending (a batch that failed half way).
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []*proxyConn
}

type proxyConn struct {
	client, server net.Conn
	mu             sync.Mutex
	sent           bytes.Buffer // what the client sent first (up to 4 KiB), to tell kinds apart
	deaf           bool         // server → client bytes are dropped
	// cutAt, cutLeft and tail arm a cut (CutBefore): before the cutLeft-th marker from now.
	cutAt   []byte
	cutLeft int
	tail    []byte // the last bytes seen, for a marker split across reads
}

// NewProxy listens on a free loopback port and forwards every connection to target. It is
// closed with the test.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting and closes every proxied connection.
func (p *Proxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
}

func (p *Proxy) accept() {
	for {
		cl, err := p.ln.Accept()
		if err != nil {
			return
		}
		sv, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = cl.Close()
			continue
		}
		c := &proxyConn{client: cl, server: sv}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go c.up()
		go c.down()
	}
}

func (c *proxyConn) up() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			c.mu.Lock()
			if c.sent.Len() < 4<<10 {
				c.sent.Write(buf[:n])
			}
			data, cut := c.cut(buf[:n])
			_, werr := c.server.Write(data)
			c.mu.Unlock()
			if cut {
				// The server loses the connection; the client learns it from down(), which
				// closes its side with what it sent unread (a reset: its writes fail).
				_ = c.server.Close()
				return
			}
			if werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = c.server.Close()
			return
		}
	}
}

// cut returns the part of data to forward and whether an armed cut falls in it.
func (c *proxyConn) cut(data []byte) ([]byte, bool) {
	if c.cutLeft == 0 {
		return data, false
	}
	joined := append(append([]byte(nil), c.tail...), data...)
	from := 0
	for {
		i := bytes.Index(joined[from:], c.cutAt)
		if i < 0 {
			break
		}
		i += from
		if c.cutLeft--; c.cutLeft == 0 {
			return data[:max(i-len(c.tail), 0)], true
		}
		from = i + len(c.cutAt)
	}
	c.tail = append(c.tail[:0], joined[max(from, len(joined)-len(c.cutAt)+1):]...)
	return data, false
}

// CutBefore arms every connection open now whose first bytes match: the n-th time from now
// that the client's stream holds marker, the proxy forwards only what came before it, stops
// reading from the client and closes both sides, the client's with what it sent unread (so
// a write of the client under way or later fails). It returns how many it armed.
func (p *Proxy) CutBefore(match func(first []byte) bool, marker []byte, n int) int {
	cs := p.matching(match)
	for _, c := range cs {
		c.mu.Lock()
		c.cutAt, c.cutLeft, c.tail = marker, n, nil
		c.mu.Unlock()
	}
	return len(cs)
}

func (c *proxyConn) down() {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			c.mu.Lock()
			deaf := c.deaf
			c.mu.Unlock()
			if !deaf {
				if _, werr := c.client.Write(buf[:n]); werr != nil {
					err = werr
				}
			}
		}
		if err != nil {
			_ = c.client.Close()
			return
		}
	}
}

// IsSubscriber reports whether a connection's first bytes hold a (S)SUBSCRIBE: a pub/sub
// connection, not one of the client's pool.
func IsSubscriber(first []byte) bool {
	return bytes.Contains(bytes.ToLower(first), []byte("subscribe"))
}

// Inject writes cmd (a RESP command) to the server on every connection whose first bytes
// match, between two of the client's writes, and returns how many connections it wrote to.
func (p *Proxy) Inject(match func(first []byte) bool, cmd []byte) int {
	n := 0
	for _, c := range p.matching(match) {
		c.mu.Lock()
		_, err := c.server.Write(cmd)
		c.mu.Unlock()
		if err == nil {
			n++
		}
	}
	return n
}

// Deafen makes every connection open now whose first bytes match drop what the server
// sends from now on, without closing it; later connections are not affected. It returns
// how many connections it deafened.
func (p *Proxy) Deafen(match func(first []byte) bool) int {
	cs := p.matching(match)
	for _, c := range cs {
		c.mu.Lock()
		c.deaf = true
		c.mu.Unlock()
	}
	return len(cs)
}

func (p *Proxy) matching(match func(first []byte) bool) []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*proxyConn
	for _, c := range p.conns {
		c.mu.Lock()
		ok := match(c.sent.Bytes())
		c.mu.Unlock()
		if ok {
			out = append(out, c)
		}
	}
	return out
}

// RESP encodes a command as Redis's protocol does.
func RESP(args ...string) []byte {
	var b bytes.Buffer
	b.WriteString("*")
	b.WriteString(strconv.Itoa(len(args)))
	b.WriteString("\r\n")
	for _, a := range args {
		b.WriteString("$")
		b.WriteString(strconv.Itoa(len(a)))
		b.WriteString("\r\n")
		b.WriteString(a)
		b.WriteString("\r\n")
	}
	return b.Bytes()
}
