package testutil

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ReverbgoBinary is the reverbgo binary a black-box test runs: REVERBGO_BIN when set, else
// one built from this checkout into the test's temporary directory.
func ReverbgoBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("REVERBGO_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "reverbgo")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/reverbgo")
	cmd.Dir = RepoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/reverbgo: %v\n%s", err, out)
	}
	return bin
}

// Process is one reverbgo started by StartReverbgo.
type Process struct {
	URL    string // http://127.0.0.1:port
	Log    string // the file its stdout and stderr go to
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartReverbgo writes configYAML (which must listen on addr) to a file, starts bin with it
// and waits until /up answers 200. The process gets SIGTERM (then SIGKILL) when the test
// ends. Laravel's REVERB_* and REDIS_* variables are not passed on: they would override the
// file.
func StartReverbgo(t testing.TB, bin, addr, configYAML string) *Process {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(configYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "reverbgo.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "start", "--config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REVERB_") && !strings.HasPrefix(kv, "REDIS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p := &Process{URL: "http://" + addr, Log: logf.Name(), cmd: cmd, exited: exited}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		_ = logf.Close()
	})
	ready := func() bool {
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("reverbgo exited before serving:\n%s", b)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/up", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	WaitForWithin(t, 30*time.Second, "reverbgo on "+addr+" to answer /up", ready)
	return p
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// Kill ends the process with SIGKILL (a crash: no shutdown work) and waits until it exited.
func (p *Process) Kill() error {
	if err := p.cmd.Process.Kill(); err != nil && !p.Exited() {
		return err
	}
	<-p.exited
	return nil
}

// StopAll sends SIGTERM to every process at once and waits up to d for all to exit: the
// shutdowns overlap instead of following one another as their cleanups do. Those still
// running then get SIGQUIT (the Go runtime writes every goroutine's stack to their log) and,
// a second later, SIGKILL; StopAll returns them.
func StopAll(d time.Duration, ps ...*Process) (hung []*Process) {
	for _, p := range ps {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for _, p := range ps {
		select {
		case <-p.exited:
			continue
		case <-deadline.C:
		}
		break
	}
	for _, p := range ps {
		if !p.Exited() {
			hung = append(hung, p)
			_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		}
	}
	if len(hung) > 0 {
		time.Sleep(time.Second)
	}
	for _, p := range ps {
		if !p.Exited() {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
	}
	return hung
}

// Logs returns what the process has written so far.
func (p *Process) Logs() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}
