package bridge

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The hand-written fast paths against the encoding/json reference they fall back to, on the
// messages a page and an agent send most. benchstat -col /impl puts the two side by side:
//
//	go test -run '^$' -bench 'Decode(PageMessage|CallRequest)' -count 10 ./bridge | tee b.txt
//	benchstat -col /impl b.txt
//
// The comparison with JSON libraries (sonic, fastjson), kept out of the server's go.mod, is
// bench/jsoncmp.

func benchPageInputs(b *testing.B) map[string][]byte {
	b.Helper()
	in := map[string][]byte{
		"result-ok-text": []byte(`{"protocol":1,"type":"result","clientId":"k7c1e0de-0000-4000-8000-000000000001","id":"c1",` +
			`"result":{"status":"ok","data":{"title":"Caf\u00e9 \"Le Zinc\"","notes":"line one\nline two","tags":["a","b"],"count":3}}}`),
		"result-ok-large": []byte(`{"protocol":1,"type":"result","clientId":"k7c1e0de-0000-4000-8000-000000000001","id":"c1",` +
			`"result":{"status":"ok","data":{"rows":[` + strings.Repeat(`{"id":12345,"name":"row name","ok":true,"score":0.75},`, 40) + `{}]}}}`),
	}
	fixtures := map[string]json.RawMessage{}
	for _, fx := range loadFixtures(b) {
		fixtures[fx.name] = fx.message
	}
	for name, file := range map[string]string{"result-ok": "valid-result-ok.json", "result-error": "valid-result-error.json",
		"confirmed": "valid-confirmed.json", "manifest": "valid-manifest.json"} {
		var c bytes.Buffer
		if err := json.Compact(&c, fixtures[file]); err != nil { // as a page sends it
			b.Fatalf("%s: %v", file, err)
		}
		in[name] = c.Bytes()
	}
	return in
}

func BenchmarkDecodePageMessage(b *testing.B) {
	impls := []struct {
		name   string
		decode func([]byte) (*PageMessage, error)
	}{{"ours", DecodePageMessage}, {"std", decodePageMessage}}
	for name, body := range benchPageInputs(b) {
		for _, im := range impls {
			b.Run("in="+name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := im.decode(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkDecodeCallRequest(b *testing.B) {
	inputs := map[string][]byte{
		"call": []byte(`{"user_id":"u1","conversation_id":"c1","tool":"form.fill","input":{"title":"x"},"rev":5,"tool_use_id":"toolu_1"}`),
		"call-form": []byte(`{"user_id":"42","conversation_id":"conv_8f3a2c","tool":"challenges.create.fill","input":{"title":"Ten thousand steps",` +
			`"description":"Walk every day for a month","starts_at":"2026-12-01","goal":10000,"public":true},"rev":17,` +
			`"tool_use_id":"toolu_01A09q90qw90lq917835lq9","timeout_ms":30000}`),
		"call-text": []byte(`{"user_id":"42","conversation_id":"conv_8f3a2c","tool":"notes.write","input":{"text":"Caf\u00e9 \"Le Zinc\"\nopens at 8"},"rev":3}`),
	}
	impls := []struct {
		name   string
		decode func([]byte, string, time.Duration) (*callRequest, error)
	}{{"ours", decodeCallRequest}, {"std", slowDecodeCallRequest}}
	for name, body := range inputs {
		for _, im := range impls {
			b.Run("in="+name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := im.decode(body, KindCall, 10*time.Minute); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
