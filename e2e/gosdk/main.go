// Command gosdk drives the reverbgo MCP endpoint with the official Go SDK client, for the e2e
// tests (e2e/test/31-mcp-auth.test.js) against the built binary. It connects (at -version, or
// the SDK's own choice: 2026-07-28 first), prints one JSON line per step on stdout and reads
// nothing: {"step":"connected","protocol":...}, {"step":"listed","tools":[...]},
// {"step":"called","result":...}, then waits for notifications/tools/list_changed
// ({"step":"changed"}) and lists again. Any failure is {"step":"error","error":...}, exit 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	_, _ = os.Stdout.Write(append(b, '\n'))
}

func fail(err error) {
	emit(map[string]any{"step": "error", "error": err.Error()})
	os.Exit(1)
}

func main() {
	url := flag.String("url", "", "the MCP endpoint")
	token := flag.String("token", "", "the bearer token")
	version := flag.String("version", "", "protocol version to ask for (\"\" = the SDK's choice)")
	call := flag.String("call", "", "a tool to call after the first list")
	wait := flag.Duration("wait", 10*time.Second, "how long to wait for list_changed")
	flag.Parse()

	changed := make(chan struct{}, 8)
	c := sdk.NewClient(&sdk.Implementation{Name: "reverbgo-e2e-gosdk", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: *url,
		HTTPClient: &http.Client{Transport: bearer{*token}}}, &sdk.ClientSessionOptions{ProtocolVersion: *version})
	if err != nil {
		fail(err)
	}
	defer cs.Close()
	emit(map[string]any{"step": "connected", "protocol": cs.InitializeResult().ProtocolVersion})
	list := func() {
		l, err := cs.ListTools(ctx, nil)
		if err != nil {
			fail(err)
		}
		names := []string{}
		for _, t := range l.Tools {
			names = append(names, t.Name)
		}
		emit(map[string]any{"step": "listed", "tools": names})
	}
	list()
	if *call != "" {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: *call, Arguments: map[string]any{}})
		if err != nil {
			fail(err)
		}
		emit(map[string]any{"step": "called", "isError": res.IsError, "result": res.StructuredContent})
	}
	select {
	case <-changed:
		emit(map[string]any{"step": "changed"})
		list()
	case <-time.After(*wait):
		emit(map[string]any{"step": "timeout"})
	}
}
