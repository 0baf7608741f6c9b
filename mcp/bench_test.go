package mcp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reverbgo/reverbgo/auth"
)

// The two benchmarks below run one tool call round trip each over real HTTP against the same
// in-process bridge and page fake (which answers through the bridge's page endpoint): through
// the MCP endpoint (the Go SDK's client, token check, streamable handler) and through the signed
// calls API. Their difference is what MCP adds per call; each reports its p99 as p99-ns. CI runs
// them with -benchtime=1x to keep them working; figures belong in docs/benchmarks.md only when
// taken on a quiet machine.

func reportP99(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Nanoseconds()), "p99-ns")
}

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
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("call: %v %+v", err, res)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportP99(b, lat)
}

func BenchmarkCallsAPIRoundTrip(b *testing.B) {
	h := newHarness(b, bridgeLimits())
	h.page.setAnswer(standardPage)
	h.openPage("c1", "p1", 1, testTools)
	body := []byte(`{"user_id":"u1","conversation_id":"c1","tool":"notes.create","input":{"title":"Hi"},"rev":1}`)
	const path = "/apps/app1/toolmark/calls"
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		q := auth.SignRequest(http.MethodPost, path, nil, body, "key1", "secret1", time.Now())
		res, err := http.Post(h.srv.URL+path+"?"+q.Encode(), "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"status":"ok"`)) {
			b.Fatalf("call: %d %s", res.StatusCode, out)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportP99(b, lat)
}
