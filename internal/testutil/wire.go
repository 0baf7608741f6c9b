package testutil

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// The raw-wire helpers the transport (ws) and protocol (pusher) tests share: a hand-written
// upgrade, a strict reader of server frames and a slow reader. Standard library only, so the
// ws package's own tests can use them without an import cycle.

// RawHead dials addr, sends the pieces with a 50 ms pause between them, and returns the
// response head, the first frame after a 101 (if any) and the connection (closed by cleanup).
// Reads give up after timeout.
func RawHead(t *testing.T, addr string, timeout time.Duration, pieces ...string) (string, []byte, net.Conn) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	for i, p := range pieces {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := io.WriteString(nc, p); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.SetReadDeadline(time.Now().Add(timeout))
	br := bufio.NewReader(nc)
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		head.WriteString(line)
		if err != nil || line == "\r\n" {
			break
		}
	}
	var frame []byte
	if strings.HasPrefix(head.String(), "HTTP/1.1 101") {
		b0, _ := br.ReadByte()
		n, _ := br.ReadByte()
		frame = make([]byte, int(n&0x7f))
		_, _ = io.ReadFull(br, frame)
		frame = append([]byte{b0, n}, frame...)
	}
	return head.String(), frame, nc
}

// ServerFrame is one frame as a strict client reads it.
type ServerFrame struct {
	Op      byte
	Payload []byte
}

// ReadServerFrame reads one server-to-client frame and rejects anything RFC 6455 forbids a
// server to send: RSV bits, a mask, a fragment, an unknown opcode, a control frame over 125
// bytes. A frame boundary lost in the stream shows up as one of these.
func ReadServerFrame(r *bufio.Reader) (ServerFrame, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return ServerFrame{}, err
	}
	if h[0]&0x80 == 0 || h[0]&0x70 != 0 || h[1]&0x80 != 0 {
		return ServerFrame{}, fmt.Errorf("bad frame header %#x %#x", h[0], h[1])
	}
	op := h[0] & 0x0F
	switch op {
	case 0x1, 0x8, 0x9, 0xA: // text, close, ping, pong
	default:
		return ServerFrame{}, fmt.Errorf("bad opcode %#x", op)
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return ServerFrame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return ServerFrame{}, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 64<<20 || (op >= 0x8 && n > 125) {
		return ServerFrame{}, fmt.Errorf("bad length %d for opcode %#x", n, op)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return ServerFrame{}, err
	}
	return ServerFrame{Op: op, Payload: p}, nil
}

// SlowReader reads R in pieces of at most Piece bytes with Pause before each, so the server's
// socket buffer stays full and its writer keeps meeting partial writes.
type SlowReader struct {
	R     io.Reader
	Piece int
	Pause time.Duration
}

func (s *SlowReader) Read(p []byte) (int, error) {
	time.Sleep(s.Pause)
	return s.R.Read(p[:min(len(p), s.Piece)])
}
