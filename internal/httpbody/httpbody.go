// Package httpbody reads a request body under a size limit in one allocation, for the HTTP
// API (apisign) and the bridge's endpoints alike.
package httpbody

import (
	"errors"
	"io"
	"net/http"
)

// ErrTooLarge: the body is over the limit, announced (Content-Length) or read.
var ErrTooLarge = errors.New("httpbody: request body too large")

// Prealloc is the most Read allocates before the bytes arrive: an announced Content-Length
// is trusted only up to it, so a client trickling a large body holds no more than it sent.
const Prealloc = 16 << 10

// Read reads r's body through http.MaxBytesReader on w (the server's own ResponseWriter, so
// going over the limit also closes the connection instead of draining the rest). A
// Content-Length over limit is refused before reading; a request without a body gives nil.
// When Content-Length is announced and right this is one allocation: the buffer has one
// spare byte, so the read that reports EOF needs no growth (bytes.Buffer.ReadFrom grew an
// exact-size buffer by 512 bytes, twice).
func Read(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, ErrTooLarge
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	buf := make([]byte, 0, min(max(r.ContentLength, 511), Prealloc)+1)
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := rd.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, ErrTooLarge
			}
			return nil, err
		}
	}
}
