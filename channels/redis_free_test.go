package channels_test

import (
	"os/exec"
	"strings"
	"testing"
)

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
