package webhooks

import "github.com/reverbgo/reverbgo/auth"

// sign is X-Pusher-Signature: lower-case hex HMAC-SHA256 of the exact body with the app
// secret. It delegates to package auth so the server has one audited signing
// implementation; TestSignatureVector pins the value independently of auth.
func sign(secret string, body []byte) string {
	return auth.WebhookSignature(secret, body)
}
