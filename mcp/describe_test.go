package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reverbgo/reverbgo/bridge"
	"github.com/reverbgo/reverbgo/config"
)

// TestOneDescribeCache: the bridge's record of describes is the only one (issue 24). A
// describe answered through the bridge's pipeline on the calls API's surface is listed by
// tools/list without a second describe to the page, with validation on or off (before, MCP
// kept its own cache and described the tool again); a failed describe is not listed and the
// next list describes the tool again.
func TestOneDescribeCache(t *testing.T) {
	for _, mode := range []string{config.ValidateKnown, config.ValidateOff} {
		t.Run(mode, func(t *testing.T) {
			h := newHarness(t, bridgeLimits())
			h.apps[0].Toolmark.Validate = mode
			h.page.setAnswer(standardPage)
			h.openPage("c1", "p1", 1, testTools)
			ctx := context.Background()
			key := bridge.ConvKey{App: "app1", User: "u1", Conversation: "c1"}
			out, err := h.br.Invoke(ctx, h.apps[0], bridge.Invocation{Key: key, Kind: bridge.KindDescribe,
				Tool: "notes.create", Timeout: 3 * time.Second, Surface: bridge.SurfaceAPI})
			if err != nil || out.Status != bridge.StatusOK {
				t.Fatalf("describe: %v %s", err, out.Result)
			}
			cs := h.client(token("secret1", nil), nil)
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if s := string(mustJSON(list.Tools[0].InputSchema)); !strings.Contains(s, `"title"`) {
				t.Fatalf("schema %s", s)
			}
			n := map[string]int{}
			for _, m := range h.page.messages(bridge.TypeDescribe) {
				n[m.Tool]++
			}
			if n["notes.create"] != 1 || n["inbox.read"] != 1 {
				t.Fatalf("describes %v: the API's describe was not seen by tools/list", n)
			}
		})
	}
}

// TestFailedDescribeDescribedAgain: a describe the page refuses is not listed (the tool is
// {"type":"object"}) and the next tools/list describes it again and lists its answer.
func TestFailedDescribeDescribedAgain(t *testing.T) {
	h := newHarness(t, bridgeLimits())
	var refuse atomic.Bool
	refuse.Store(true)
	h.page.setAnswer(func(m pageMsg) json.RawMessage {
		if m.Type == bridge.TypeDescribe && m.Tool == "notes.create" && refuse.Load() {
			return mustJSON(map[string]any{"status": "error", "message": "not yet"})
		}
		return standardPage(m)
	})
	h.openPage("c1", "p1", 1, testTools)
	cs := h.client(token("secret1", nil), nil)
	ctx := context.Background()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(mustJSON(list.Tools[0].InputSchema)); s != `{"type":"object"}` {
		t.Fatalf("failed describe listed %s", s)
	}
	refuse.Store(false)
	for i := 0; i < 2; i++ {
		if list, err = cs.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if s := string(mustJSON(list.Tools[0].InputSchema)); !strings.Contains(s, `"title"`) {
			t.Fatalf("list %d: schema %s", i, s)
		}
	}
	if n := len(h.page.messages(bridge.TypeDescribe)); n != 3 {
		t.Fatalf("%d describes, want 3 (notes.create twice, inbox.read once)", n)
	}
}
