package httpbody

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		length  int64 // Content-Length; -1 = unknown (chunked)
		limit   int64
		want    string
		wantErr error
	}{
		{"announced and right", "hello", 5, 10, "hello", nil},
		{"unknown length", "hello", -1, 10, "hello", nil},
		{"announced over the limit", "hello", 5, 4, "", ErrTooLarge},
		{"read over the limit", "hello world", -1, 4, "", ErrTooLarge},
		{"larger than the preallocation", strings.Repeat("x", Prealloc*2), -1, Prealloc * 4, strings.Repeat("x", Prealloc*2), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(tc.body))
			r.ContentLength = tc.length
			got, err := Read(httptest.NewRecorder(), r, tc.limit)
			if !errors.Is(err, tc.wantErr) || string(got) != tc.want {
				t.Fatalf("Read = %d bytes, %v; want %d bytes, %v", len(got), err, len(tc.want), tc.wantErr)
			}
		})
	}
	if got, err := Read(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", http.NoBody), 10); got != nil || err != nil {
		t.Fatalf("no body: %q %v", got, err)
	}
}

func TestReadOneAllocation(t *testing.T) {
	body := strings.Repeat("x", 300)
	allocs := testing.AllocsPerRun(100, func() {
		r := &http.Request{Body: readCloser{strings.NewReader(body)}, ContentLength: int64(len(body))}
		_, _ = Read(nil, r, 1000)
	})
	if allocs > 3 { // the buffer, the MaxBytesReader, the test's own reader
		t.Fatalf("%.1f allocations per read", allocs)
	}
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }
