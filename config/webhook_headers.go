package config

import (
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// reservedWebhookHeaders are set by the server on every webhook POST: a configured header
// may not replace them, because the receiver's signature check and framing depend on them.
var reservedWebhookHeaders = []string{"Content-Type", "Content-Length", "Host", "X-Pusher-Key", "X-Pusher-Signature", "Transfer-Encoding", "Connection"}

// maxWebhookHeaders bounds webhooks[].headers; a receiver needs a handful at most.
const maxWebhookHeaders = 32

// checkWebhookHeaders accepts HTTP token names and values without control characters (a
// CR or LF would let a config value inject further headers).
func checkWebhookHeaders(v *validator, key string, h map[string]string) {
	if len(h) > maxWebhookHeaders {
		v.add(key, "at most %d headers, got %d", maxWebhookHeaders, len(h))
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names) // deterministic error order
	for _, name := range names {
		switch {
		case !httpguts.ValidHeaderFieldName(name):
			v.add(key, "%q is not a valid header name", name)
		case slices.Contains(reservedWebhookHeaders, http.CanonicalHeaderKey(name)):
			v.add(key+"."+name, "is set by the server and cannot be configured (reserved: %s)", strings.Join(reservedWebhookHeaders, ", "))
		case !httpguts.ValidHeaderFieldValue(h[name]):
			v.add(key+"."+name, "value must not contain control characters")
		}
	}
}
