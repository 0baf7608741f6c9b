package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/reverbgo/reverbgo/auth"
)

// maxAbuseCycle bounds one abusive connection when the server never cuts it: it is then
// closed and opened again, so the soak keeps the same number of them.
const maxAbuseCycle = 90 * time.Second

// trickle opens a TCP connection, writes head, then one byte of tail per interval until the
// server closes the connection (or maxAbuseCycle passes); then does it again.
func (s *soak) trickle(ctx context.Context, head, tail string, interval time.Duration, n interface{ Add(int64) int64 }) {
	for ctx.Err() == nil {
		nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		closed := make(chan struct{})
		go func() { // the server's answer (a 408/413/400 or nothing) and its close
			_, _ = io.Copy(io.Discard, nc)
			close(closed)
		}()
		end := time.Now().Add(maxAbuseCycle)
		_, err = nc.Write([]byte(head))
		for i := 0; err == nil && time.Now().Before(end); i++ {
			select {
			case <-ctx.Done():
				nc.Close()
				return
			case <-closed:
				err = io.EOF
				continue
			case <-time.After(interval):
			}
			_, err = nc.Write([]byte{tail[i%len(tail)]})
		}
		nc.Close()
		<-closed
		n.Add(1)
		sleepCtx(ctx, time.Second) // a server that cuts at once must not turn this into a flood
	}
}

// slowBody announces a 1 MiB body to an unauthenticated request of path and trickles it:
// the server should answer before reading it.
func (s *soak) slowBody(ctx context.Context, path string) {
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nX-Socket-ID: 1.1\r\n\r\n{", path, s.addr, 1<<20)
	s.trickle(ctx, head, "aaaaaaaa", time.Second, &s.c.slowBody)
}

// slowSignedBody sends a correctly signed trigger whose body (under max_request_size)
// trickles in one byte per second: it passes the signature, so only the server's read
// timeout can cut it.
func (s *soak) slowSignedBody(ctx context.Context) {
	path := "/apps/" + s.appID + "/events"
	body := `{"name":"slow","channel":"soak-slow","data":"` + strings.Repeat("a", 8000) + `"}`
	q := auth.SignRequest("POST", path, nil, []byte(body), s.key, s.secret, time.Now())
	head := fmt.Sprintf("POST %s?%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		path, q.Encode(), s.addr, len(body), body[:40])
	s.trickle(ctx, head, "a", time.Second, &s.c.slowSigned)
}

// slowLoris sends a request head one header byte per second, never finishing it.
func (s *soak) slowLoris(ctx context.Context) {
	head := "GET /app/" + s.key + " HTTP/1.1\r\nHost: " + s.addr + "\r\n"
	s.trickle(ctx, head, "X-Loris: a\r\n", time.Second, &s.c.slowLoris)
}

// invalidFrames upgrades a WebSocket and sends a frame the server must refuse (reserved
// opcode, unmasked, invalid UTF-8, oversize length), in turn, waiting for the close.
func (s *soak) invalidFrames(ctx context.Context) {
	frames := [][]byte{
		{0x83, 0x80, 1, 2, 3, 4},                         // reserved opcode 3, masked, empty
		{0x81, 0x02, 'h', 'i'},                           // unmasked text
		masked(0x81, []byte{0xff, 0xfe}),                 // invalid UTF-8
		{0x81, 0xff, 0, 0, 0, 1, 0, 0, 0, 0, 1, 2, 3, 4}, // 4 GiB announced
	}
	for i := 0; ctx.Err() == nil; i++ {
		c, err := s.dial(ctx)
		if err != nil {
			sleepCtx(ctx, time.Second)
			continue
		}
		_ = c.WS.UnderlyingConn().SetDeadline(time.Now().Add(15 * time.Second))
		if _, err := c.WS.UnderlyingConn().Write(frames[i%len(frames)]); err == nil {
			for {
				if _, err := c.Read(); err != nil {
					break
				}
			}
		}
		c.WS.Close()
		s.c.bad.Add(1)
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// masked frames payload as a client must (mask key 1,2,3,4).
func masked(b0 byte, payload []byte) []byte {
	key := [4]byte{1, 2, 3, 4}
	out := []byte{b0, 0x80 | byte(len(payload))}
	out = append(out, key[:]...)
	for i, c := range payload {
		out = append(out, c^key[i%4])
	}
	return out
}
