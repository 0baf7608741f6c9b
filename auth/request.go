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
	var arr [maxQueryParams]queryParam
	return verifyParams(method, path, paramsOf(arr[:0], query), key, secret, now)
}

// VerifyRawQuery is VerifyQuery of a raw query string as (*url.URL).Query parses it
// (url.ParseQuery, malformed pairs dropped), without building the url.Values: a signed query
// of up to maxQueryParams parameters is checked without allocating. It also returns the
// body_md5 parameter (and whether it was present) for VerifyBodyMD5.
func VerifyRawQuery(method, path, rawQuery, key, secret string, now time.Time) (bodyMD5 string, hasBodyMD5 bool, err error) {
	var arr [maxQueryParams]queryParam
	ps, ok := parseRawQuery(arr[:0], rawQuery)
	if !ok {
		q, _ := url.ParseQuery(rawQuery) // as (*url.URL).Query: what parsed, errors ignored
		ps = paramsOf(arr[:0], q)
	}
	if err := verifyParams(method, path, ps, key, secret, now); err != nil {
		return "", false, err
	}
	p, has := param(ps, paramBodyMD5)
	return p.v, has, nil
}

// maxQueryParams is how many parameters the verifiers hold without allocating; the Pusher
// SDKs send five or six.
const maxQueryParams = 16

// queryParam is one query parameter name (exact) and its first value; none marks a name with
// no value at all (url.Values{name: {}}, which no parsed query holds).
type queryParam struct {
	k, v string
	none bool
}

// paramsOf appends the parameters of q to dst.
func paramsOf(dst []queryParam, q url.Values) []queryParam {
	for k, v := range q {
		p := queryParam{k: k, none: len(v) == 0}
		if len(v) > 0 {
			p.v = v[0]
		}
		dst = append(dst, p)
	}
	return dst
}

// parseRawQuery appends the parameters of raw to dst exactly as url.ParseQuery builds its
// url.Values (split on '&', a pair with ';' or that does not unescape dropped, the first value
// of a name kept), or reports false for a query of more than maxQueryParams pairs, which the
// caller parses with url.ParseQuery itself (which also applies its own limit).
func parseRawQuery(dst []queryParam, raw string) ([]queryParam, bool) {
	if strings.Count(raw, "&")+1 > maxQueryParams {
		return dst, false
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.Contains(pair, ";") {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, err := url.QueryUnescape(k)
		if err != nil {
			continue
		}
		if v, err = url.QueryUnescape(v); err != nil {
			continue
		}
		if _, seen := param(dst, k); !seen {
			dst = append(dst, queryParam{k: k, v: v})
		}
	}
	return dst, true
}

// param is the parameter named name (exactly), as url.Values.Get and an index see it.
func param(ps []queryParam, name string) (queryParam, bool) {
	for _, p := range ps {
		if p.k == name {
			return p, true
		}
	}
	return queryParam{}, false
}

// get is url.Values.Get over ps.
func get(ps []queryParam, name string) string {
	p, _ := param(ps, name)
	return p.v
}

// verifyParams is VerifyQuery over the parameters ps.
func verifyParams(method, path string, ps []queryParam, key, secret string, now time.Time) error {
	for _, name := range []string{paramKey, paramTimestamp, paramSignature} {
		if get(ps, name) == "" {
			return reqErr("Missing %s", name)
		}
	}
	if key == "" || secret == "" {
		// A misconfigured app must not accept requests signed with an empty secret.
		return reqErr("Unknown auth_key")
	}
	if !Equal(get(ps, paramKey), key) {
		return reqErr("Unknown auth_key")
	}
	if v, ok := param(ps, paramVersion); ok && (v.none || v.v != authVersion) {
		return reqErr("Unsupported auth_version: must be %s", authVersion)
	}

	rawTS := get(ps, paramTimestamp)
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
	toSign, err := appendToSign(buf[:0], method, path, ps)
	if err != nil {
		return err
	}
	if !hmacHexEqual(secret, toSign, get(ps, paramSignature)) {
		return reqErr("Invalid signature")
	}
	return nil
}

// VerifyBody checks the body against the signed query: body_md5 is present when body is
// non-empty, and when present equals the hex MD5 of body, so the signature (which covers
// body_md5) also covers the body. It is only meaningful after VerifyQuery accepted query.
func VerifyBody(query url.Values, body []byte) error {
	got, ok := query[paramBodyMD5]
	if ok && len(got) == 0 {
		return reqErr("body_md5 does not match")
	}
	first := ""
	if ok {
		first = got[0]
	}
	return VerifyBodyMD5(first, ok, body)
}

// VerifyBodyMD5 is VerifyBody given the query's body_md5 value and whether it was present
// (as VerifyRawQuery returns them).
func VerifyBodyMD5(got string, present bool, body []byte) error {
	if present {
		sum := md5.Sum(body)
		var want [2 * md5.Size]byte
		hex.Encode(want[:], sum[:])
		if len(got) != len(want) || !equalFoldASCII(got, want[:]) {
			return reqErr("body_md5 does not match")
		}
	} else if len(body) > 0 {
		return reqErr("Missing body_md5")
	}
	return nil
}

// equalFoldASCII is strings.EqualFold(s, string(b)) for a lower-case hex b, without the
// string.
func equalFoldASCII(s string, b []byte) bool {
	for i := range b {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != b[i] {
			return false
		}
	}
	return true
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
	b, err := appendToSign(nil, method, path, paramsOf(nil, query))
	return string(b), err
}

// signPair is one query parameter of the string to sign: the lower-cased name and its first
// value.
type signPair struct{ k, v string }

// appendToSign appends stringToSign's string of the parameters ps to dst. It allocates
// nothing for a query of up to maxQueryParams parameters when dst has room: it runs on every
// signed request.
func appendToSign(dst []byte, method, path string, ps []queryParam) ([]byte, error) {
	var arr [maxQueryParams]signPair
	pairs := arr[:0]
	for _, p := range ps {
		pairs = append(pairs, signPair{strings.ToLower(p.k), p.v})
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
