package httpguard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// tooLarge answers 413 the ways the routes do: after reading over the limit through
// http.MaxBytesReader (the API, the bridge), after reading over it through a LimitReader
// (MCP, the console), or from the announced Content-Length before reading at all.
func tooLarge(w http.ResponseWriter, r *http.Request) {
	const limit = 1 << 10
	switch r.URL.Path {
	case "/maxbytes":
		if _, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit)); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
	case "/limit":
		if b, _ := io.ReadAll(io.LimitReader(r.Body, limit+1)); len(b) > limit {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
	case "/announced":
		if r.ContentLength > limit {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
			return
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// TestOversizedBodiesReadTheir413: a client that writes a whole 5 MB body while it reads
// (as curl and node do) gets its 413 and writes its body to the end without a reset, 100
// times in a row on each way of refusing. (node's http client reports the reset of a write
// as the request's error even when the 413 has arrived.)
func TestOversizedBodiesReadTheir413(t *testing.T) {
	ts, _ := server(t, Options{}, tooLarge)
	body := bytes.Repeat([]byte("x"), 5_000_000)
	for _, path := range []string{"/maxbytes", "/limit", "/announced"} {
		t.Run(path, func(t *testing.T) {
			for i := range 100 {
				if code, err := postLarge(ts.Listener.Addr().String(), path, body); err != nil || code != http.StatusRequestEntityTooLarge {
					t.Fatalf("request %d: status %d, error %v", i, code, err)
				}
			}
		})
	}
}

// postLarge writes the request on one goroutine (its write errors are expected once the
// server closes) and reads the answer on this one.
func postLarge(addr, path string, body []byte) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	wrote := make(chan error, 1)
	go func() {
		_, err := fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", path, len(body))
		for b := body; len(b) > 0 && err == nil; b = b[min(len(b), 64<<10):] {
			_, err = c.Write(b[:min(len(b), 64<<10)])
		}
		wrote <- err
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	if err := <-wrote; err != nil {
		return resp.StatusCode, fmt.Errorf("writing the body: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.Close || resp.Header.Get("Connection") == "close" {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, errors.New("a 413 with body left unread kept the connection")
}
