//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/reverbgo/reverbgo/bench/internal/benchkit"
	"github.com/reverbgo/reverbgo/internal/pusherclient"
)

// The agent over the server's MCP endpoint (--agent mcp): one session per conversation,
// opened after the page's manifest (the token names the conversation), and every call a
// tools/call of the page's tool by its llmName on that session. The input {"seq":N} is
// unique per call and the page echoes it, so it joins the agent's and the page's records in
// place of the call id, which MCP does not return.

// mcpToolName is toolName's llmName in the bench manifest: the MCP tool name.
const mcpToolName = "bench_echo"

// openMCP initializes p's MCP session.
func (r *runner) openMCP(ctx context.Context, p *page) error {
	// The token outlives the run (the server bounds its lifetime: 1 h by default).
	ttl := min(r.cfg.Timeout+time.Minute, 50*time.Minute)
	tok, err := benchkit.MCPToken(pusherclient.App{ID: r.cfg.AppID, Key: r.cfg.Key, Secret: r.cfg.Secret},
		r.cfg.User, p.conv, r.cfg.MCPResource, ttl)
	if err != nil {
		return fmt.Errorf("page %d: mcp token: %w", p.idx, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	s, err := benchkit.MCPConnect(sctx, r.agentHTTP, r.mcpURL, tok)
	if err != nil {
		return fmt.Errorf("page %d: %w", p.idx, err)
	}
	p.mcp = s
	return nil
}

// callMCP makes one tools/call and checks the echo, as call does for the calls API.
func (r *runner) callMCP(ctx context.Context, p *page, idx int64, body []byte) ([]byte, agentRec) {
	var input [32]byte
	in := append(strconv.AppendInt(append(input[:0], `{"seq":`...), idx, 10), '}')
	rec := agentRec{start: time.Since(r.base)}
	resp, code, body, err := p.mcp.CallTool(ctx, mcpToolName, in, body)
	rec.end = time.Since(r.base)
	switch {
	case err != nil && code == 0:
		if ctx.Err() == nil {
			r.agentErr("transport")
			r.sample("agent: " + err.Error())
		} else {
			r.agentErr("cancelled")
		}
		return body, rec
	case code != 200:
		r.agentErr("http_" + strconv.Itoa(code))
		r.sample(fmt.Sprintf("agent: HTTP %d %.200s", code, resp))
		return body, rec
	case err != nil:
		r.agentErr("bad_response")
		r.sample("agent: " + err.Error())
		return body, rec
	}
	res, err := benchkit.DecodeMCPToolResult(resp)
	rec.id = string(in)
	switch {
	case err != nil:
		r.agentErr("bad_response")
		r.sample(fmt.Sprintf("agent: %.200s", resp))
	case res.RPCErr != "":
		r.agentErr("rpc_error")
		r.sample("agent: JSON-RPC error " + res.RPCErr)
	case res.Status != "ok" || res.IsError:
		r.agentErr("result_" + res.Status)
		r.sample(fmt.Sprintf("agent: result %s %s", res.Status, res.Message))
	case !bytes.Equal(res.Data, in):
		r.agentErr("echo_mismatch")
		r.sample(fmt.Sprintf("agent: sent %s got %s", in, res.Data))
	default:
		rec.ok = true
	}
	return body, rec
}

// closeMCP ends the pages' MCP sessions (DELETE), a few at a time, bounded.
func (r *runner) closeMCP(pages []*page) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sem := make(chan struct{}, 16)
	for _, p := range pages {
		if p.mcp == nil {
			continue
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_ = p.mcp.Close(ctx)
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
}
