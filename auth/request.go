package auth

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxClockSkew is how far auth_timestamp may be from the server clock, in either direction.
// Pusher enforces this window to bound replay of a captured signed request; Reverb never
// checks it, and reverbgo follows Pusher.
const MaxClockSkew = 600 * time.Second

// Query parameter names of the Pusher HTTP API signature scheme. They are matched exactly
// (lower-case), as every SDK sends them.
const (
	paramKey       = "auth_key"
	paramTimestamp = "auth_timestamp"
	paramVersion   = "auth_version"
	paramBodyMD5   = "body_md5"
	paramSignature = "auth_signature"
	authVersion    = "1.0"
)

// RequestError is why a signed HTTP API request was refused. Reason is a plain message that
// is safe to send back in the 401 body: it tells an SDK user what to fix without revealing
// anything about the secret.
type RequestError struct{ Reason string }

// Error returns Reason unchanged, so handlers can write it as the response body.
func (e *RequestError) Error() string { return e.Reason }

func reqErr(format string, args ...any) error {
	return &RequestError{Reason: fmt.Sprintf(format, args...)}
}

// VerifyRequest checks a Pusher HTTP API request signed by a server SDK: VerifyQuery, then
// VerifyBody. A nil error means the request is authentic; otherwise the error is a
// *RequestError. Servers that read the body themselves call the two halves apart, so that
// no byte of an unauthenticated body is read (see apisign).
func VerifyRequest(method, path string, query url.Values, body []byte, key, secret string, now time.Time) error {
	if err := VerifyQuery(method, path, query, key, secret, now); err != nil {
		return err
	}
	return VerifyBody(query, body)
}

// VerifyQuery checks everything of a signed request that does not need the body:
//
//   - auth_key, auth_timestamp and auth_signature are present and auth_key equals key;
//   - auth_version, when present, is "1.0";
//   - |now - auth_timestamp| <= MaxClockSkew, to limit replay;
//   - auth_signature equals HMAC(secret, METHOD+"\n"+path+"\n"+params), compared in constant
//     time, where params is "k=v&..." over every query parameter but auth_signature, keys
//     lower-cased and sorted, values unescaped, first value of each key.
//
// The signature covers body_md5 (a query parameter), so once it holds, VerifyBody binds the
// body to it. path is the request path without any configured server prefix, because SDKs
// sign the path they were given, which never includes the prefix. Two parameters whose names
// differ only in case are refused: the string to sign would be ambiguous.
func VerifyQuery(method, path string, query url.Values, key, secret string, now time.Time) error {
	for _, name := range []string{paramKey, paramTimestamp, paramSignature} {
		if query.Get(name) == "" {
			return reqErr("Missing %s", name)
		}
	}
	if key == "" || secret == "" {
		// A misconfigured app must not accept requests signed with an empty secret.
		return reqErr("Unknown auth_key")
	}
	if !Equal(query.Get(paramKey), key) {
		return reqErr("Unknown auth_key")
	}
	if v, ok := query[paramVersion]; ok && (len(v) == 0 || v[0] != authVersion) {
		return reqErr("Unsupported auth_version: must be %s", authVersion)
	}

	rawTS := query.Get(paramTimestamp)
	ts, err := strconv.ParseInt(rawTS, 10, 64)
	if err != nil {
		return reqErr("Invalid auth_timestamp: %q is not a number of seconds", rawTS)
	}
	// Compare against bounds derived from now rather than computing now-ts, which could
	// overflow for a hostile timestamp near the int64 limits.
	nowS, skew := now.Unix(), int64(MaxClockSkew/time.Second)
	if ts < nowS-skew || ts > nowS+skew {
		return reqErr("Timestamp expired: auth_timestamp %d is more than %d seconds from server time %d", ts, skew, nowS)
	}

	var buf [512]byte
	toSign, err := appendToSign(buf[:0], method, path, query)
	if err != nil {
		return err
	}
	if !hmacHexEqual(secret, toSign, query.Get(paramSignature)) {
		return reqErr("Invalid signature")
	}
	return nil
}

// VerifyBody checks the body against the signed query: body_md5 is present when body is
// non-empty, and when present equals the hex MD5 of body, so the signature (which covers
// body_md5) also covers the body. It is only meaningful after VerifyQuery accepted query.
func VerifyBody(query url.Values, body []byte) error {
	if got, ok := query[paramBodyMD5]; ok {
		if len(got) == 0 || !strings.EqualFold(got[0], bodyMD5(body)) {
			return reqErr("body_md5 does not match")
		}
	} else if len(body) > 0 {
		return reqErr("Missing body_md5")
	}
	return nil
}

// SignRequest signs a Pusher HTTP API request the way server SDKs do. It returns a copy of
// extra with auth_key, auth_timestamp, auth_version, body_md5 (only when body is non-empty)
// and auth_signature set; encode it as the query string. extra is not modified. It exists so
// tests and Go clients produce exactly what VerifyRequest accepts.
func SignRequest(method, path string, extra url.Values, body []byte, key, secret string, now time.Time) url.Values {
	params := make(url.Values, len(extra)+5)
	for k, v := range extra {
		params[k] = append([]string(nil), v...)
	}
	params.Set(paramKey, key)
	params.Set(paramTimestamp, strconv.FormatInt(now.Unix(), 10))
	params.Set(paramVersion, authVersion)
	params.Del(paramSignature)
	if len(body) > 0 {
		params.Set(paramBodyMD5, bodyMD5(body))
	} else {
		params.Del(paramBodyMD5)
	}
	// stringToSign only fails on keys equal up to case; sign anyway so the caller sees
	// VerifyRequest refuse it rather than a silent half-signed request.
	toSign, _ := stringToSign(method, path, params)
	params.Set(paramSignature, HMACHex(secret, []byte(toSign)))
	return params
}

// stringToSign builds METHOD + "\n" + path + "\n" + sorted "k=v&..." as Pusher specifies.
// The method is upper-cased because the spec and every SDK sign it upper-case.
func stringToSign(method, path string, query url.Values) (string, error) {
	b, err := appendToSign(nil, method, path, query)
	return string(b), err
}

// signPair is one query parameter of the string to sign: the lower-cased name and its first
// value.
type signPair struct{ k, v string }

// appendToSign appends stringToSign's string to dst. It allocates nothing for a query of up
// to a dozen parameters when dst has room: it runs on every signed request.
func appendToSign(dst []byte, method, path string, query url.Values) ([]byte, error) {
	var arr [12]signPair
	pairs := arr[:0]
	for k, v := range query {
		first := ""
		if len(v) > 0 {
			first = v[0]
		}
		pairs = append(pairs, signPair{strings.ToLower(k), first})
	}
	slices.SortFunc(pairs, func(a, b signPair) int { return strings.Compare(a.k, b.k) })
	for i := 1; i < len(pairs); i++ {
		if pairs[i].k == pairs[i-1].k {
			return nil, reqErr("Duplicate query parameter: %s", pairs[i].k)
		}
	}
	for i := 0; i < len(method); i++ {
		c := method[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		dst = append(dst, c)
	}
	dst = append(dst, '\n')
	dst = append(dst, path...)
	dst = append(dst, '\n')
	first := true
	for _, p := range pairs {
		if p.k == paramSignature {
			continue
		}
		if !first {
			dst = append(dst, '&')
		}
		first = false
		dst = append(dst, p.k...)
		dst = append(dst, '=')
		dst = append(dst, p.v...)
	}
	return dst, nil
}

// bodyMD5 is the lower-case hex MD5 Pusher uses to bind the body into the signed query.
// MD5 is the protocol's choice; its weakness does not matter here because the HMAC over the
// query, not the MD5, is what an attacker would have to forge.
func bodyMD5(body []byte) string {
	sum := md5.Sum(body)
	return hex.EncodeToString(sum[:])
}
