package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// callAudit accumulates the one audit line of a call.
type callAudit struct {
	key        ConvKey
	id, tool   string
	kind       string
	surface    string // SurfaceAPI or SurfaceMCP
	subject    string // the MCP token's sub; "" for the signed API
	status     string
	reason     string
	dryRun     bool
	inManifest bool
	input      json.RawMessage // a call's input: only its top-level keys are logged
	start      time.Time
}

// Bounds of the input_keys audit field.
const (
	maxAuditKeys   = 32
	maxAuditKeyLen = 64
)

// redacted replaces an input key that looks like a credential's name.
const redacted = "[redacted]"

// sensitiveKeyParts: an input key containing one of these (case-insensitive) is logged as
// [redacted]: the key alone can say what the value is (api_key, session_token).
var sensitiveKeyParts = [...]string{"password", "token", "secret", "authorization", "cookie", "key"}

// auditCall writes the one structured line per call: never input or result values.
func (b *Bridge) auditCall(au *callAudit) {
	lat := b.now().Sub(au.start)
	b.met.call(au.key.App, au.surface, au.kind, au.tool, au.inManifest, au.status, lat, b.now())
	b.observeEnd(au, lat)
	attrs := make([]slog.Attr, 0, 14)
	attrs = append(attrs,
		slog.String("app", au.key.App), slog.String("user", au.key.User),
		slog.String("conversation", au.key.Conversation), slog.String("call_id", au.id),
		slog.String("tool", au.tool), slog.String("kind", au.kind), slog.String("surface", au.surface),
		slog.String("subject", au.subject), slog.String("status", au.status),
		slog.Int64("latency_ms", lat.Milliseconds()),
	)
	if au.kind == KindCall {
		attrs = append(attrs, slog.Any("input_keys", inputKeys(au.input)))
	}
	if au.dryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	if au.reason != "" {
		attrs = append(attrs, slog.String("reason", au.reason))
	}
	b.log.LogAttrs(context.Background(), slog.LevelInfo, "toolmark call", attrs...)
}

// inputKeys returns the top-level keys of an object input, in input order, credential-like
// names redacted, at most maxAuditKeys (then "+N more") of at most maxAuditKeyLen bytes. Any
// other input (null, an array, a string) has no keys: [].
func inputKeys(input json.RawMessage) []string {
	keys := []string{}
	if kind(input) != 'o' {
		return keys
	}
	n := 0
	add := func(k string) {
		n++
		if len(keys) < maxAuditKeys {
			keys = append(keys, auditKey(k))
		}
	}
	s := scanner{b: input}
	if !s.members(func(k, _ []byte) bool { add(string(k)); return true }) {
		// An escaped key: the reference decoder (the input is valid JSON).
		keys, n = keys[:0], 0
		var o map[string]json.RawMessage
		if json.Unmarshal(input, &o) != nil {
			return keys
		}
		names := make([]string, 0, len(o))
		for k := range o {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			add(k)
		}
	}
	if n > len(keys) {
		keys = append(keys, "+"+strconv.Itoa(n-len(keys))+" more")
	}
	return keys
}

func auditKey(k string) string {
	lower := strings.ToLower(k)
	for _, part := range sensitiveKeyParts {
		if strings.Contains(lower, part) {
			return redacted
		}
	}
	if len(k) > maxAuditKeyLen {
		k = k[:maxAuditKeyLen]
		for len(k) > 0 && !utf8.ValidString(k) {
			k = k[:len(k)-1]
		}
	}
	return k
}
