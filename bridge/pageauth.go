package bridge

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"

	"github.com/reverbgo/reverbgo/config"
)

// Page authentication (toolmark.page_auth).
//
// With "token" (the default) the server sends the page, on its channel and to its socket
// alone, the event toolmark.session {"token": "..."} just before subscription_succeeded
// (pusher/session.go); the page sends it back as X-Toolmark-Token with every POST, next to
// X-Socket-ID. The socket lookup already returns the SHA-256 of the token of each of the
// socket's toolmark subscriptions (from the socket itself, or from the cluster socket index
// for a socket on another node), so checking it costs no extra round trip. The socket id
// alone is not a credential: Echo's axios interceptor sends it with every request of the page.

// PageTokenHeader carries the page token.
const PageTokenHeader = "X-Toolmark-Token"

// maxSocketID bounds X-Socket-ID: two decimal parts of at most 12 digits are issued, and
// Pusher's own ids are shorter.
const maxSocketID = 32

// TokenHash is the lowercase hex SHA-256 of a page token, as Sockets returns it.
func TokenHash(token string) string {
	var buf [64]byte // a page token is 43 bytes: hashed from the stack
	h := sha256.Sum256(append(buf[:0], token...))
	var out [2 * sha256.Size]byte
	hex.Encode(out[:], h[:])
	return string(out[:])
}

// validSocketID reports whether id has the form ^\d+\.\d+$ and at most maxSocketID bytes,
// checked before the id becomes a lookup key (in cluster mode a lookup costs Redis reads).
func validSocketID(id string) bool {
	if len(id) < 3 || len(id) > maxSocketID {
		return false
	}
	dot := -1
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= '0' && c <= '9':
		case c == '.' && dot < 0:
			dot = i
		default:
			return false
		}
	}
	return dot > 0 && dot < len(id)-1
}

// pageTokenOK compares the presented token's hash with the subscription's in constant time;
// an app in socket_id mode accepts any. A subscription without a token (issued before the
// app switched to token mode) never matches.
func pageTokenOK(app *config.App, presented, wantHash string) bool {
	if app.Toolmark.PageAuth == config.PageAuthSocketID {
		return true
	}
	if presented == "" || len(presented) > 256 || wantHash == "" {
		return false
	}
	if len(wantHash) != 2*sha256.Size {
		return false // only the length leaks, and it is public
	}
	var buf [256]byte // presented is at most 256 bytes: hashed from the stack
	sum := sha256.Sum256(append(buf[:0], presented...))
	var got [2 * sha256.Size]byte
	hex.Encode(got[:], sum[:])
	// Constant time, as subtle.ConstantTimeCompare, without a copy of either string.
	var diff byte
	for i := range got {
		diff |= got[i] ^ wantHash[i]
	}
	return subtle.ConstantTimeByteEq(diff, 0) == 1
}
