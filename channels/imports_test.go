package channels_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports: channels knows nothing of WebSockets or of the JSON in frames. Nothing it
// depends on is the transport (ws: the frame layout it needs is internal/wsframe,
// compression comes in as a Compressor), and neither it nor a package of this module it
// depends on decodes JSON (member events say what they are in Message.Member). log/slog
// uses encoding/json itself; that is not channels reading frames.
func TestImports(t *testing.T) {
	const module = "github.com/reverbgo/reverbgo"
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/channels").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v\n%s", err, out)
	}
	seen := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if pkg == module+"/ws" {
			t.Errorf("channels depends on %s", pkg)
		}
		if pkg != module && !strings.HasPrefix(pkg, module+"/") {
			continue
		}
		seen = seen || pkg == module+"/channels"
		for _, imp := range strings.Fields(imports) {
			if imp == "encoding/json" {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
	if !seen {
		t.Fatalf("go list did not list channels:\n%s", out)
	}
}

// TestRedisFree keeps the Redis client out of the single-node packages: channels and pusher
// reach Redis only through the seams that internal/cluster implements, so neither may import
// go-redis or internal/redisx, directly or through another package.
func TestRedisFree(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go tool is not on PATH")
	}
	for _, pkg := range []string{"github.com/reverbgo/reverbgo/channels", "github.com/reverbgo/reverbgo/pusher"} {
		out, err := exec.Command(gobin, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/redis/go-redis") || dep == "github.com/reverbgo/reverbgo/internal/redisx" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
