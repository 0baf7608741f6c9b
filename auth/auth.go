// Package auth holds the Pusher Channels signatures reverbgo checks and produces: private,
// presence and signin authorisation strings sent by clients, the signed query of the HTTP API
// used by server SDKs, and the X-Pusher-Signature of webhooks.
//
// Everything here is a pure function over strings and bytes, with no configuration and no
// I/O, so that the wire handlers, the HTTP API and the webhook sender share one audited
// implementation and the test vectors of the Pusher documentation pin it down. Every
// comparison of a secret-derived value is constant-time.
package auth

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// HMACHex returns the lower-case hex HMAC-SHA256 of msg keyed with secret. Pusher encodes
// every signature this way, so all other functions in this package are built on it.
func HMACHex(secret string, msg []byte) string {
	var sum [sha256.Size]byte
	var out [2 * sha256.Size]byte
	hmacSum(secret, msg, &sum)
	hex.Encode(out[:], sum[:])
	return string(out[:])
}

// hmacHexEqual reports, in constant time, whether sig is HMACHex(secret, msg): the same
// comparison as Equal(sig, HMACHex(secret, msg)) without the hex string and its copies.
func hmacHexEqual(secret string, msg []byte, sig string) bool {
	var sum [sha256.Size]byte
	var want [2 * sha256.Size]byte
	hmacSum(secret, msg, &sum)
	hex.Encode(want[:], sum[:])
	if len(sig) != len(want) {
		return false // only the length leaks, as with Equal
	}
	var diff byte
	for i := range want {
		diff |= sig[i] ^ want[i]
	}
	return subtle.ConstantTimeByteEq(diff, 0) == 1
}

// Equal reports whether a and b are equal without leaking, through timing, how long their
// common prefix is; otherwise an attacker could recover a valid signature byte by byte. Only
// the length may leak, and signature lengths are public.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// ChannelSignature is the signature a client must present to subscribe to a private channel:
// HMAC(secret, socket_id + ":" + channel). Binding the socket id stops a leaked signature
// from being replayed on another connection.
func ChannelSignature(secret, socketID, channel string) string {
	return HMACHex(secret, []byte(socketID+":"+channel))
}

// PresenceSignature is the signature for a presence subscription:
// HMAC(secret, socket_id + ":" + channel + ":" + channel_data). channelData must be the exact
// string the client sent (not a re-encoding), because the app's auth endpoint signed those
// bytes and they carry the user id the server will trust.
func PresenceSignature(secret, socketID, channel, channelData string) string {
	return HMACHex(secret, []byte(socketID+":"+channel+":"+channelData))
}

// SigninSignature is the signature of pusher:signin (user authentication):
// HMAC(secret, socket_id + "::user::" + user_data). The "::user::" separator keeps it
// distinct from every channel signature, so one can never be used as the other.
func SigninSignature(secret, socketID, userData string) string {
	return HMACHex(secret, []byte(socketID+"::user::"+userData))
}

// VerifyChannel checks the "auth" field ("key:hexsig") of a pusher:subscribe for a private or
// presence channel. channelData is "" for private channels and the exact channel_data string
// for presence channels; callers must reject a presence subscription without channel_data
// before calling, since an empty channelData selects the private-channel formula.
//
// An empty key or secret never verifies, so a half-configured app cannot be subscribed to with
// a signature computed over an empty secret.
func VerifyChannel(key, secret, socketID, channel, channelData, authField string) bool {
	var want string
	if channelData == "" {
		want = ChannelSignature(secret, socketID, channel)
	} else {
		want = PresenceSignature(secret, socketID, channel, channelData)
	}
	return verifyAuthField(key, secret, want, authField)
}

// VerifySignin checks the "auth" field ("key:hexsig") of a pusher:signin against userData,
// the exact user_data string the client sent.
func VerifySignin(key, secret, socketID, userData, authField string) bool {
	return verifyAuthField(key, secret, SigninSignature(secret, socketID, userData), authField)
}

// verifyAuthField splits "key:sig" and compares both halves in constant time. Both are
// compared even when the key already differs, so timing does not tell which half was wrong.
func verifyAuthField(key, secret, want, authField string) bool {
	if key == "" || secret == "" {
		return false
	}
	gotKey, gotSig, ok := strings.Cut(authField, ":")
	if !ok {
		return false
	}
	keyOK := Equal(gotKey, key)
	sigOK := Equal(gotSig, want)
	return keyOK && sigOK
}

// WebhookSignature is the X-Pusher-Signature header of a webhook: hex HMAC-SHA256(secret,
// body). Receivers verify it with the app secret to know the POST came from this server.
func WebhookSignature(secret string, body []byte) string {
	return HMACHex(secret, body)
}
