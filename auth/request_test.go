package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The HTTP API worked example of docs/pusher-protocol.md.
const (
	docBody   = `{"name":"foo","channels":["project-3"],"data":"{\"some\":\"data\"}"}`
	docPath   = "/apps/3/events"
	docTS     = 1353088179
	docMD5    = "ec365a775a4cd0599faeb73354201b6f"
	docSig    = "da454824c97ba181a32ccc17a72625ba02771f50b50e1e7430e47a1f3f457e6c"
	docSigned = "auth_key=" + docKey + "&auth_timestamp=1353088179&auth_version=1.0&body_md5=" + docMD5
)

var docNow = time.Unix(docTS, 0)

func mustQuery(t *testing.T, raw string) url.Values {
	t.Helper()
	q, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatalf("ParseQuery(%q): %v", raw, err)
	}
	return q
}

func TestSignRequestWorkedExample(t *testing.T) {
	q := SignRequest("POST", docPath, nil, []byte(docBody), docKey, docSecret, docNow)
	want := mustQuery(t, docSigned+"&auth_signature="+docSig)
	if q.Encode() != want.Encode() {
		t.Fatalf("SignRequest =\n %s\nwant\n %s", q.Encode(), want.Encode())
	}
}

func TestSignRequestDoesNotModifyExtra(t *testing.T) {
	extra := url.Values{"info": {"user_count"}, "body_md5": {"stale"}}
	q := SignRequest("GET", "/apps/3/channels", extra, nil, docKey, docSecret, docNow)
	if len(extra) != 2 || extra.Get("body_md5") != "stale" {
		t.Fatalf("extra was modified: %v", extra)
	}
	if _, ok := q["body_md5"]; ok {
		t.Fatal("body_md5 must not be sent for an empty body")
	}
	if err := VerifyRequest("GET", "/apps/3/channels", q, nil, docKey, docSecret, docNow); err != nil {
		t.Fatalf("round trip: %v", err)
	}
}

// signRaw signs canonical with the canonical rules written out by hand, for cases SignRequest
// cannot produce (uppercase keys sent on the wire).
func signRaw(method, path, canonical string) string {
	return HMACHex(docSecret, []byte(method+"\n"+path+"\n"+canonical))
}

func TestVerifyRequest(t *testing.T) {
	body := []byte(docBody)
	valid := docSigned + "&auth_signature=" + docSig
	signedGet := func(extra url.Values) string {
		return SignRequest("GET", "/apps/3/channels", extra, nil, docKey, docSecret, docNow).Encode()
	}
	upperCanonical := "auth_key=" + docKey + "&auth_timestamp=1353088179&auth_version=1.0&filter_by_prefix=presence-"
	upperRaw := "auth_key=" + docKey + "&auth_timestamp=1353088179&auth_version=1.0&Filter_By_Prefix=presence-"

	tests := []struct {
		name    string
		method  string
		path    string
		query   string
		body    []byte
		key     string
		secret  string
		now     time.Time
		wantErr string // prefix of the reason; "" = accepted
	}{
		{"worked example", "POST", docPath, valid, body, docKey, docSecret, docNow, ""},
		{"lower-case method", "post", docPath, valid, body, docKey, docSecret, docNow, ""},
		{"params in any order", "POST", docPath,
			"auth_signature=" + docSig + "&body_md5=" + docMD5 + "&auth_version=1.0&auth_timestamp=1353088179&auth_key=" + docKey,
			body, docKey, docSecret, docNow, ""},
		{"skew +600s", "POST", docPath, valid, body, docKey, docSecret, docNow.Add(600 * time.Second), ""},
		{"skew -600s", "POST", docPath, valid, body, docKey, docSecret, docNow.Add(-600 * time.Second), ""},
		{"stale timestamp", "POST", docPath, valid, body, docKey, docSecret, docNow.Add(601 * time.Second), "Timestamp expired"},
		{"future timestamp", "POST", docPath, valid, body, docKey, docSecret, docNow.Add(-601 * time.Second), "Timestamp expired"},
		{"wrong key", "POST", docPath, valid, body, "otherkey", docSecret, docNow, "Unknown auth_key"},
		{"empty configured secret", "POST", docPath, valid, body, docKey, "", docNow, "Unknown auth_key"},
		{"wrong secret", "POST", docPath, valid, body, docKey, "othersecret", docNow, "Invalid signature"},
		{"bad md5", "POST", docPath,
			strings.Replace(valid, docMD5, "00000000000000000000000000000000", 1),
			body, docKey, docSecret, docNow, "Invalid signature"}, // the signature covers body_md5
		{"body tampered", "POST", docPath, valid, []byte(`{"name":"bar"}`), docKey, docSecret, docNow, "body_md5 does not match"},
		{"body without body_md5", "POST", docPath,
			"auth_key=" + docKey + "&auth_timestamp=1353088179&auth_version=1.0&auth_signature=" + docSig,
			body, docKey, docSecret, docNow, "Invalid signature"}, // the query was signed with body_md5
		{"body signed without body_md5", "POST", docPath,
			SignRequest("POST", docPath, nil, nil, docKey, docSecret, docNow).Encode(),
			body, docKey, docSecret, docNow, "Missing body_md5"},
		{"body_md5 with empty body", "POST", docPath, valid, nil, docKey, docSecret, docNow, "body_md5 does not match"},
		{"path tampered", "POST", "/apps/4/events", valid, body, docKey, docSecret, docNow, "Invalid signature"},
		{"path with prefix", "POST", "/ws" + docPath, valid, body, docKey, docSecret, docNow, "Invalid signature"},
		{"method tampered", "PUT", docPath, valid, body, docKey, docSecret, docNow, "Invalid signature"},
		{"param added", "POST", docPath, valid + "&socket_id=1.1", body, docKey, docSecret, docNow, "Invalid signature"},
		{"signature truncated", "POST", docPath, docSigned + "&auth_signature=" + docSig[:63],
			body, docKey, docSecret, docNow, "Invalid signature"},
		{"signature upper-case", "POST", docPath, docSigned + "&auth_signature=" + strings.ToUpper(docSig),
			body, docKey, docSecret, docNow, "Invalid signature"},
		{"missing auth_key", "POST", docPath, strings.Replace(valid, "auth_key=", "x=", 1),
			body, docKey, docSecret, docNow, "Missing auth_key"},
		{"missing auth_timestamp", "POST", docPath, strings.Replace(valid, "auth_timestamp=", "x=", 1),
			body, docKey, docSecret, docNow, "Missing auth_timestamp"},
		{"missing auth_signature", "POST", docPath, docSigned, body, docKey, docSecret, docNow, "Missing auth_signature"},
		{"empty query", "GET", "/apps/3/channels", "", nil, docKey, docSecret, docNow, "Missing auth_key"},
		{"auth_version missing is fine", "GET", "/apps/3/channels",
			"auth_key=" + docKey + "&auth_timestamp=1353088179&auth_signature=" +
				signRaw("GET", "/apps/3/channels", "auth_key="+docKey+"&auth_timestamp=1353088179"),
			nil, docKey, docSecret, docNow, ""},
		{"auth_version 2.0", "POST", docPath, strings.Replace(valid, "auth_version=1.0", "auth_version=2.0", 1),
			body, docKey, docSecret, docNow, "Unsupported auth_version"},
		{"timestamp not a number", "POST", docPath, strings.Replace(valid, "1353088179", "soon", 1),
			body, docKey, docSecret, docNow, "Invalid auth_timestamp"},
		{"timestamp max int64", "POST", docPath, strings.Replace(valid, "1353088179", "9223372036854775807", 1),
			body, docKey, docSecret, docNow, "Timestamp expired"},
		{"timestamp min int64", "POST", docPath, strings.Replace(valid, "1353088179", "-9223372036854775808", 1),
			body, docKey, docSecret, docNow, "Timestamp expired"},
		{"timestamp overflow", "POST", docPath, strings.Replace(valid, "1353088179", "99999999999999999999", 1),
			body, docKey, docSecret, docNow, "Invalid auth_timestamp"},
		{"GET with params", "GET", "/apps/3/channels",
			signedGet(url.Values{"filter_by_prefix": {"presence-"}, "info": {"user_count"}}),
			nil, docKey, docSecret, docNow, ""},
		{"uppercase AUTH_ names are not auth params", "POST", docPath,
			strings.NewReplacer("auth_key=", "AUTH_KEY=").Replace(valid), body, docKey, docSecret, docNow, "Missing auth_key"},
		{"uppercase key signed lower-cased", "GET", "/apps/3/channels",
			upperRaw + "&auth_signature=" + signRaw("GET", "/apps/3/channels", upperCanonical),
			nil, docKey, docSecret, docNow, ""},
		{"uppercase key signed as sent", "GET", "/apps/3/channels",
			upperRaw + "&auth_signature=" + signRaw("GET", "/apps/3/channels", strings.Replace(upperCanonical, "filter_by_prefix", "Filter_By_Prefix", 1)),
			nil, docKey, docSecret, docNow, "Invalid signature"},
		{"keys equal up to case", "GET", "/apps/3/channels",
			signedGet(url.Values{"info": {"user_count"}}) + "&INFO=x",
			nil, docKey, docSecret, docNow, "Duplicate query parameter"},
		{"second auth_signature in other case", "POST", docPath, valid + "&AUTH_SIGNATURE=x",
			body, docKey, docSecret, docNow, "Duplicate query parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyRequest(tt.method, tt.path, mustQuery(t, tt.query), tt.body, tt.key, tt.secret, tt.now)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var re *RequestError
			if !errors.As(err, &re) {
				t.Fatalf("error = %v (%T), want *RequestError %q", err, err, tt.wantErr)
			}
			if !strings.HasPrefix(re.Error(), tt.wantErr) || re.Reason != re.Error() {
				t.Fatalf("reason = %q, want prefix %q", re.Error(), tt.wantErr)
			}
		})
	}
}

// FuzzVerifyRequest feeds arbitrary methods, paths, raw query strings and bodies. Verification
// must never panic, and a request signed by SignRequest must verify unless its parameters
// are ambiguous up to case or shadow the auth parameters.
func FuzzVerifyRequest(f *testing.F) {
	f.Add("POST", docPath, docSigned+"&auth_signature="+docSig, []byte(docBody))
	f.Add("GET", "/apps/3/channels", "filter_by_prefix=presence-&info=user_count", []byte(nil))
	f.Add("GET", "/apps/3/channels/presence-x/users", "auth_key=&auth_timestamp=x&auth_signature=", []byte(nil))
	f.Add("post", "", "A=1&a=2&%zz", []byte("{}"))
	f.Add("DELETE", "/\n", "auth_timestamp=-9223372036854775808&auth_key=k&auth_signature=s", []byte{0xff})
	f.Add("", "/apps/1/events", "auth_version=&body_md5=&auth_signature=&=", []byte("x"))
	f.Add("POST", docPath, docSigned+"&auth_signature="+docSig+"&AUTH_KEY=x;y&body_md5=1&&=&%41=b", []byte(docBody))
	f.Add("POST", docPath, "auth_signature="+docSig+"&auth_key=278d425bdf160c739803&auth_key=other&"+strings.TrimPrefix(docSigned, "auth_key=278d425bdf160c739803&"), []byte(docBody))
	f.Fuzz(func(t *testing.T, method, path, rawQuery string, body []byte) {
		q, _ := url.ParseQuery(rawQuery) // keep whatever parsed, as net/http does
		_ = VerifyRequest(method, path, q, body, docKey, docSecret, docNow)
		sameAsRaw(t, method, path, rawQuery, body)

		seen := map[string]bool{}
		for k := range q {
			lk := strings.ToLower(k)
			if seen[lk] || strings.HasPrefix(lk, "auth_") || lk == "body_md5" {
				return
			}
			seen[lk] = true
		}
		signed := SignRequest(method, path, q, body, docKey, docSecret, docNow)
		if err := VerifyRequest(method, path, signed, body, docKey, docSecret, docNow); err != nil {
			t.Fatalf("signed request refused: %v (query %q)", err, signed.Encode())
		}
		// Round trip through the wire encoding too, as a real client would send it.
		reparsed, err := url.ParseQuery(signed.Encode())
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		if err := VerifyRequest(method, path, reparsed, body, docKey, docSecret, docNow); err != nil {
			t.Fatalf("re-parsed signed request refused: %v", err)
		}
		sameAsRaw(t, method, path, signed.Encode(), body)
	})
}

// sameAsRaw fails unless VerifyRawQuery + VerifyBodyMD5 of rawQuery answer exactly as
// VerifyRequest of the url.Values (*url.URL).Query would give.
func sameAsRaw(t *testing.T, method, path, rawQuery string, body []byte) {
	t.Helper()
	q, _ := url.ParseQuery(rawQuery)
	want := VerifyRequest(method, path, q, body, docKey, docSecret, docNow)
	md5, has, got := VerifyRawQuery(method, path, rawQuery, docKey, docSecret, docNow)
	if got == nil {
		got = VerifyBodyMD5(md5, has, body)
	}
	if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
		t.Fatalf("raw query %q: VerifyRawQuery says %v, VerifyRequest %v", rawQuery, got, want)
	}
}

// TestVerifyRawQueryAllocs: the raw-query verifier agrees with VerifyRequest over url.ParseQuery on
// the signed example and every way of mangling it, and allocates nothing.
func TestVerifyRawQueryAllocs(t *testing.T) {
	good := docSigned + "&auth_signature=" + docSig
	many := good
	for i := range 20 {
		many += "&x" + strconv.Itoa(i) + "=1"
	}
	for _, raw := range []string{
		good,
		good + "&auth_signature=0" + docSig[1:], // a second signature: the first counts
		"auth_signature=0" + docSig[1:] + "&" + docSigned, // the first is wrong
		good + "&a=1;b=2",                // a semicolon pair is dropped
		good + "&%zz=1", good + "&x=%zz", // pairs that do not unescape are dropped
		good + "&&&=", good + "&=x", good + "&x", // empty pairs, names, values
		good + "&AUTH_KEY=x",                                // equal up to case: refused as ambiguous
		good + "&auth_version=1.1", good + "&auth_version=", // the version is checked
		strings.Replace(good, "auth_key=", "auth_key=%32", 1),
		strings.Replace(good, "body_md5=", "body_md5=%65", 1),
		strings.Replace(good, "body_md5=ec365a775a4cd0599faeb73354201b6f", "body_md5=EC365A775A4CD0599FAEB73354201B6F", 1),
		strings.Replace(good, "body_md5=ec365a775a4cd0599faeb73354201b6f&", "", 1),
		strings.Replace(good, "+", "%20", -1),
		many, // over maxQueryParams: parsed by url.ParseQuery
		"", "&", ";", "auth_key",
	} {
		for _, body := range [][]byte{[]byte(docBody), nil, []byte("other")} {
			sameAsRaw(t, "POST", docPath, raw, body)
		}
	}
	if _, _, err := VerifyRawQuery("POST", docPath, good, docKey, docSecret, docNow); err != nil {
		t.Fatal(err)
	}
	if raceEnabled {
		return
	}
	if n := testing.AllocsPerRun(100, func() {
		md5, has, _ := VerifyRawQuery("POST", docPath, good, docKey, docSecret, docNow)
		_ = VerifyBodyMD5(md5, has, []byte(docBody))
	}); n != 0 {
		t.Errorf("VerifyRawQuery + VerifyBodyMD5: %v allocations, want 0 (url.URL.Query + VerifyRequest: %v)", n,
			testing.AllocsPerRun(100, func() {
				q, _ := url.ParseQuery(good)
				_ = VerifyRequest("POST", docPath, q, []byte(docBody), docKey, docSecret, docNow)
			}))
	}
}

// TestHMACHexEqual: the allocation-free comparison answers exactly as Equal(sig, HMACHex(...)).
func TestHMACHexEqual(t *testing.T) {
	msg := []byte("POST\n/apps/1/events\nauth_key=k")
	good := HMACHex("secret", msg)
	for _, sig := range []string{good, strings.ToUpper(good), good[:63], good + "0", "", good[:63] + "x",
		HMACHex("other", msg)} {
		if got, want := hmacHexEqual("secret", msg, sig), Equal(sig, good); got != want {
			t.Errorf("hmacHexEqual(%q) = %v, Equal says %v", sig, got, want)
		}
	}
}

// TestVerifyQueryAllocs: verifying a signed query builds its string to sign without maps.
func TestVerifyQueryAllocs(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	body := []byte(`{"name":"e"}`)
	q := SignRequest("POST", "/apps/1/events", url.Values{"info": {"x"}}, body, "key", "secret", now)
	if err := VerifyQuery("POST", "/apps/1/events", q, "key", "secret", now); err != nil {
		t.Fatal(err)
	}
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	// The HMAC keyed with the secret is pooled: nothing is allocated per request (8 when each
	// request keyed a fresh one).
	if n := testing.AllocsPerRun(100, func() { _ = VerifyQuery("POST", "/apps/1/events", q, "key", "secret", now) }); n != 0 {
		t.Errorf("VerifyQuery: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = HMACHex("secret", body) }); n != 1 {
		t.Errorf("HMACHex: %v allocations, want 1 (the string)", n)
	}
}

// TestPooledHMAC: a pooled HMAC gives what a fresh one gives, for every secret and after
// reuse, and a secret over the pool bound still signs correctly.
func TestPooledHMAC(t *testing.T) {
	msgs := []string{"", "a", "POST\n/apps/1/events\nauth_key=k", strings.Repeat("x", 300)}
	for _, secret := range []string{"s1", "s2", "", strings.Repeat("k", 100)} {
		for range 3 {
			for _, m := range msgs {
				mac := hmac.New(sha256.New, []byte(secret))
				mac.Write([]byte(m))
				want := hex.EncodeToString(mac.Sum(nil))
				if got := HMACHex(secret, []byte(m)); got != want {
					t.Fatalf("HMACHex(%q, %q) = %s, want %s", secret, m, got, want)
				}
				if !hmacHexEqual(secret, []byte(m), want) || hmacHexEqual(secret, []byte(m+"!"), want) {
					t.Fatalf("hmacHexEqual(%q, %q)", secret, m)
				}
			}
		}
	}
	for i := range maxPooledSecrets + 5 { // past the bound: fresh HMACs, same answers
		secret := "bulk-" + strconv.Itoa(i)
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte("m"))
		if got := HMACHex(secret, []byte("m")); got != hex.EncodeToString(mac.Sum(nil)) {
			t.Fatalf("secret %d: %s", i, got)
		}
	}
}
