//go:build linux

package ws

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/reverbgo/reverbgo/internal/testutil"
)

// mixedKind is what one socket of TestURingMixedRounds does.
type mixedKind int

const (
	kindFast     mixedKind = iota // its peer reads all the time
	kindMany                      // more frames per pass than one SQE carries (maxIovecs)
	kindFull                      // a small send buffer, large frames, a peer that reads now and then
	kindEmpty                     // empty frames among its own
	kindClosed                    // its descriptor is closed from another goroutine mid-stream
	kindPeerGone                  // its peer shuts down mid-stream (EPIPE)
	numKinds
)

func (k mixedKind) String() string {
	return [...]string{"fast", "many", "full", "empty", "closed", "peer gone"}[k]
}

// mixedSock is one socket of the mixed test and what was queued on it.
type mixedSock struct {
	pc    *pairConn
	kind  mixedKind
	want  bytes.Buffer // every frame WritePreframed took, in order
	ended atomic.Bool  // its descriptor was closed (kindClosed) or its peer shut down
}

// drainPeer reads what the peer has (unless it is gone).
func (s *mixedSock) drainPeer(t *testing.T) {
	drain(t, s.pc.peer, &s.pc.got)
}

// The flusher's write path under everything at once, with the loop running as the server
// runs it and a ring far smaller than the round (so rounds go in chunks): sockets that
// take everything, sockets with more frames than an SQE carries, sockets whose buffer
// fills (short writes, -EAGAIN, the slow path and back), empty frames, descriptors closed
// by another goroutine mid-stream and at once replaced by new sockets that take their
// numbers, peers that go away. On both write paths: every socket that stays open reads
// exactly what was queued on it, in order; an ended one read a prefix of it; no socket
// made after a close ever reads a byte (a write to a reused descriptor number).
func TestURingMixedRounds(t *testing.T) {
	writePaths(t, func(t *testing.T, p writePath) {
		const sockets, passes = 48, 24
		f := newFlusher(make(chan struct{}), 0)
		f.log = slog.Default()
		if p == pathURing {
			useTestRing(t, f, 8) // 48 sockets, 8 SQEs: chunks in every busy round
		}
		panicked := startFlusher(t, f)
		socks := make([]*mixedSock, sockets)
		for i := range socks {
			s := &mixedSock{pc: newPairConn(t, f), kind: mixedKind(i % int(numKinds))}
			if s.kind == kindFull {
				_ = s.pc.c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 16<<10) })
				_ = unix.SetsockoptInt(s.pc.peer, unix.SOL_SOCKET, unix.SO_RCVBUF, 16<<10)
			}
			socks[i] = s
		}

		// The closer ends the doomed sockets one by one while the passes run, and after each
		// close opens new socket pairs, which take the freed descriptor numbers.
		var pass atomic.Int64
		var reusedMu sync.Mutex
		var reused [][2]int
		closerDone := make(chan struct{})
		go func() {
			defer close(closerDone)
			k := 0
			for _, s := range socks {
				if s.kind != kindClosed && s.kind != kindPeerGone {
					continue
				}
				k++
				for pass.Load() < int64(2*k) && pass.Load() < passes {
					runtime.Gosched()
				}
				if s.kind == kindClosed {
					_ = s.pc.c.fdc.Close() // waits for a write in flight (fdConn.hold)
				} else {
					_ = unix.Shutdown(s.pc.peer, unix.SHUT_RDWR)
				}
				s.ended.Store(true)
				for range 2 {
					fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
					if err != nil {
						continue
					}
					reusedMu.Lock()
					reused = append(reused, [2]int{fds[0], fds[1]})
					reusedMu.Unlock()
				}
			}
		}()
		t.Cleanup(func() {
			<-closerDone
			for _, fds := range reused {
				_ = unix.Close(fds[0])
				_ = unix.Close(fds[1])
			}
		})

		queue := func(s *mixedSock, frame []byte) {
			if s.pc.c.WritePreframed(frame) {
				s.want.Write(frame)
			}
		}
		big := bytes.Repeat([]byte("B"), 80<<10)
		for n := range passes {
			for i, s := range socks {
				switch s.kind {
				case kindMany:
					k := 1
					if n%4 == 0 {
						k = maxIovecs + 37
					}
					for k := range k {
						queue(s, strconv.AppendInt([]byte{byte('a' + n%26)}, int64(k), 10))
					}
				case kindFull:
					frame := append([]byte(fmt.Sprintf("%d.%d:", i, n)), big[:(n%5)*(16<<10)+1]...)
					queue(s, frame)
				case kindEmpty:
					queue(s, nil)
					queue(s, []byte(fmt.Sprintf("%d.%d;", i, n)))
					queue(s, []byte{})
				default:
					queue(s, []byte(fmt.Sprintf("%d.%d:%s;", i, n, strings.Repeat("x", n*37%500))))
				}
				if s.kind != kindFull || n%7 == 0 {
					s.drainPeer(t)
				}
			}
			pass.Store(int64(n + 1))
			if r := panicked(); r != nil {
				t.Fatalf("the flusher panicked: %v", r)
			}
		}
		<-closerDone

		testutil.WaitFor(t, "every open socket's peer to read what was queued", func() bool {
			for _, s := range socks {
				if s.ended.Load() {
					continue
				}
				s.drainPeer(t)
				if s.pc.got.Len() < s.want.Len() {
					return false
				}
			}
			return true
		})
		if r := panicked(); r != nil {
			t.Fatalf("the flusher panicked: %v", r)
		}
		for i, s := range socks {
			s.drainPeer(t)
			got, want := s.pc.got.Bytes(), s.want.Bytes()
			if s.ended.Load() {
				if !bytes.HasPrefix(want, got) {
					t.Errorf("socket %d (%v, ended): read %d bytes that are not a prefix of what was queued (differ at %d)",
						i, s.kind, len(got), diffAt(string(got), string(want)))
				}
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("socket %d (%v): read %d bytes, want %d; they differ at %d", i, s.kind, len(got), len(want), diffAt(string(got), string(want)))
			}
		}
		reusedMu.Lock()
		defer reusedMu.Unlock()
		for _, fds := range reused {
			for _, fd := range fds {
				var b [1]byte
				if n, err := unix.Read(fd, b[:]); n > 0 || err != unix.EAGAIN {
					t.Errorf("a socket made after a close (fd %d) read %d bytes (err %v): a write went to a reused descriptor", fd, n, err)
				}
			}
		}
		st := &f.stats
		t.Logf("%v: %d rounds, %d writev, %d io_uring writes in %d enters, %d slow-path batches, %d sockets made after closes",
			p, st.rounds.Load(), st.writev.Load(), st.uring.Load(), st.enters.Load(), st.blocking.Load(), len(reused))
		if p == pathURing && st.uring.Load() == 0 {
			t.Fatal("nothing went through the ring")
		}
	})
}
