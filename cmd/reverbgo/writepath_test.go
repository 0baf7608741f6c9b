package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/internal/testutil"
	"github.com/reverbgo/reverbgo/ws"
)

// server.io_uring: true on a kernel that refuses io_uring (the start-up probe fails) is a
// start-up error: exit status 1 and a message naming the key and the reason, before the
// node listens. Absent or false, the same refusal is no error (the transport writes with
// writev and says so).
func TestIOUringTrueRefusedFailsStart(t *testing.T) {
	ws.TestHookURingProbe = func() error { return errors.New("operation not permitted") }
	t.Cleanup(func() { ws.TestHookURingProbe = nil })
	addr := testutil.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	cfg := fmt.Sprintf("server: {host: %s, port: %s, io_uring: true}\napps:\n  - {app_id: a, key: k, secret: s}\n", host, port)
	var out, errb testutil.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"start", "--config", writeTemp(t, "c.yaml", cfg)}, &out, &errb) }()
	select {
	case rc := <-done:
		if rc != 1 {
			t.Fatalf("exit status %d, want 1\n%s%s", rc, out.String(), errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the node started on a kernel that refuses io_uring:\n%s%s", out.String(), errb.String())
	}
	logs := out.String() + errb.String()
	if !strings.Contains(logs, "server.io_uring is true, but io_uring is refused: operation not permitted") {
		t.Fatalf("the error does not name the key and the reason:\n%s", logs)
	}
	if strings.Contains(logs, "reverbgo listening") {
		t.Fatalf("the node listened:\n%s", logs)
	}
}

func TestRequireIOUring(t *testing.T) {
	refused := errors.New("operation not permitted")
	yes, no := true, false
	tests := []struct {
		name  string
		set   *bool
		probe error
		fails bool
	}{
		{"true, refused", &yes, refused, true},
		{"true, proved", &yes, nil, false},
		{"absent, refused", nil, refused, false},
		{"false, refused", &no, refused, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probed := false
			ws.TestHookURingProbe = func() error { probed = true; return tt.probe }
			t.Cleanup(func() { ws.TestHookURingProbe = nil })
			cfg := config.Server{IOUring: tt.set}
			err := requireIOUring(&cfg)
			if (err != nil) != tt.fails {
				t.Fatalf("error %v, want failure %v", err, tt.fails)
			}
			if probed != (tt.set != nil && *tt.set) {
				t.Fatalf("probed %v", probed)
			}
		})
	}
}
