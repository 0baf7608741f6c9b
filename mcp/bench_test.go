package mcp

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// BenchmarkToolCallRoundTrip measures one MCP tools/call over real HTTP (the Go SDK's client,
// the streamable handler, token check, bridge bind/broadcast/claim) with an in-process page
// fake that answers through the bridge's page endpoint. CI runs it with -benchtime=1x; figures
// belong in docs/benchmarks.md only when taken on a quiet machine.
func BenchmarkToolCallRoundTrip(b *testing.B) {
	h := newHarness(b, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	cs := h.client(token("secret1", nil), nil)
	ctx := context.Background()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		b.Fatal(err)
	}
	params := &sdk.CallToolParams{Name: "notes__create", Arguments: map[string]any{"title": "Hi"}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %+v", err, res)
		}
	}
}
