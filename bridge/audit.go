package bridge

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
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
		attrs = append(attrs, slog.String("input_keys", inputKeys(au.input)))
	}
	if au.dryRun {
		attrs = append(attrs, slog.Bool("dry_run", true))
	}
	if au.reason != "" {
		attrs = append(attrs, slog.String("reason", au.reason))
	}
	b.log.LogAttrs(context.Background(), slog.LevelInfo, "toolmark call", attrs...)
}

// inputKeys returns the top-level keys of an object input, comma separated, in input order,
// credential-like names redacted, at most maxAuditKeys (then "+N more") of at most
// maxAuditKeyLen bytes; a ',' or '%' inside a key is written %2C or %25, so the list stays
// unambiguous. Any other input (null, an array, a string) has no keys: "". One string is the
// whole cost on the call's path (a []string attribute would cost one per key and more).
func inputKeys(input json.RawMessage) string {
	if kind(input) != 'o' {
		return ""
	}
	var buf [512]byte
	out, n := buf[:0], 0
	add := func(k []byte) {
		n++
		if n > maxAuditKeys {
			return
		}
		if n > 1 {
			out = append(out, ',')
		}
		if sensitiveKey(k) {
			out = append(out, redacted...)
			return
		}
		if len(k) > maxAuditKeyLen {
			k = k[:maxAuditKeyLen]
			for len(k) > 0 && !utf8.Valid(k) {
				k = k[:len(k)-1]
			}
		}
		for _, c := range k {
			switch c {
			case ',':
				out = append(out, "%2C"...)
			case '%':
				out = append(out, "%25"...)
			default:
				out = append(out, c)
			}
		}
	}
	s := scanner{b: input}
	if !s.members(func(k, _ []byte) bool { add(k); return true }) {
		// An escaped key: the reference decoder (the input is valid JSON).
		out, n = buf[:0], 0
		var o map[string]json.RawMessage
		if json.Unmarshal(input, &o) != nil {
			return ""
		}
		names := make([]string, 0, len(o))
		for k := range o {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			add([]byte(k))
		}
	}
	if n > maxAuditKeys {
		out = append(out, ",+"...)
		out = strconv.AppendInt(out, int64(n-maxAuditKeys), 10)
		out = append(out, " more"...)
	}
	return string(out)
}

// sensitiveKey reports whether k contains one of sensitiveKeyParts, ASCII case-insensitively
// (without allocating a lower-case copy).
func sensitiveKey(k []byte) bool {
	for _, part := range sensitiveKeyParts {
		for i := 0; i+len(part) <= len(k); i++ {
			j := 0
			for j < len(part) && k[i+j]|0x20 == part[j] {
				j++
			}
			if j == len(part) {
				return true
			}
		}
	}
	return false
}
