package jsoncmp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Input is one named message.
type Input struct {
	Name string
	Body []byte
}

const authSig = "app-key:2d0b1e2a7c4f9b1a3e5d7c9b0a2f4e6d8c0b2a4f6e8d0c2b4a6f8e0d2c4b6a8f"

// PusherInputs are what clients send most, as pusher-js / laravel-echo write them (compact
// JSON.stringify output), plus the data-as-a-string form Java and Flutter clients use.
var PusherInputs = []Input{
	{"subscribe-public", []byte(`{"event":"pusher:subscribe","data":{"auth":"","channel":"bench-1"}}`)},
	{"subscribe-private", []byte(`{"event":"pusher:subscribe","data":{"auth":"` + authSig + `","channel":"private-orders.42"}}`)},
	{"subscribe-presence", []byte(`{"event":"pusher:subscribe","data":{"auth":"` + authSig + `","channel_data":"{\"user_id\":\"42\",\"user_info\":{\"name\":\"Ada Lovelace\"}}","channel":"presence-room.7"}}`)},
	{"subscribe-string-data", []byte(`{"event":"pusher:subscribe","data":"{\"channel\":\"private-orders.42\",\"auth\":\"` + authSig + `\"}"}`)},
	{"client-event", []byte(`{"event":"client-typing","channel":"private-chat.7","data":{"user":"Ada","typing":true}}`)},
	{"ping", []byte(`{"event":"pusher:ping","data":{}}`)},
}

// pusherEdgeCases are for parity only: the fast path's seeds (pusher/message_fast_test.go) and
// the shapes a decoder can get wrong (escapes, case, duplicates, types, invalid JSON or UTF-8).
var pusherEdgeCases = []string{
	// A raw control character inside a string is invalid JSON (encoding/json refuses the
	// frame); fastjson.ValidateBytes accepts it (found by pusher's FuzzDecodeFast).
	"{\"event\":\"pusher:ping\",\"x\":\"\x1c\"}",
	"{\"event\":\"pusher:subscribe\",\"data\":{\"channel\":\"a\",\"\":\"\x1c\\b\"}}",
	`{"event":"pusher:subscribe","data":{"auth":"","channel":"bench-1"}}`,
	` { "event" : "pusher:subscribe" , "data" : { "channel" : "a" , "auth" : "k:sig" , "channel_data" : "{\"user_id\":1}" } } `,
	`{"event":"client-x","channel":"private-a","data":"{\"a\":1}"}`,
	`{"event":"client-x","channel":"private-a","data":[1,{"b":"}"},"x\"y"],"data":null}`,
	`{"event":"pusher:ping","data":{}}`,
	`{"Event":"pusher:ping"}`,
	`{"EVENT":"pusher:subscribe","Data":{"CHANNEL":"x","Auth":"a"}}`,
	`{"event":"caf\u00e9","data":1}`,
	"{\"event\":\"caf\xc3\xa9\",\"data\":true}",
	"{\"event\":\"bad\xff\"}",
	"{\"event\":\"pusher:subscribe\",\"data\":{\"channel\":\"a\xffb\"}}",
	`{"event":"\ud800x"}`,
	`{"event":null,"channel":"a"}`,
	`{"event":1}`,
	`{"event":"a","event":"b","extra":{"x":[]}}`,
	`{"data":-1.5e3,"event":"e"}`,
	`{"event":"pusher:sub\u0073cribe","data":{"chan\u006eel":"x"}}`,
	`{"event":"pusher:subscribe","data":{"channel":"a","channel":"b"}}`,
	`{"event":"pusher:subscribe","data":{"channel":1}}`,
	`{"event":"pusher:subscribe","data":{"channel":null}}`,
	`{"event":"pusher:subscribe","data":{"auth":"x"}}`,
	`{"event":"pusher:subscribe","data":null}`,
	`{"event":"pusher:subscribe"}`,
	`{"event":"pusher:subscribe","data":[{"channel":"a"}]}`,
	`{"event":"pusher:subscribe","data":" {\"channel\":\"a\"}"}`,
	`{"event":"pusher:subscribe","data":"{\"channel\":\"a\"} x"}`,
	`{"event":"pusher:subscribe","data":"not json"}`,
	`{"event":"pusher:unsubscribe","data":{"channel":"private-a"}}`,
	`{"event":"client-x","channel":"c","data":{ "a" : [ 1 , 2 ] }}`,
	`{"event":"client-x","channel":"c","data":01}`,
	`{"event":"client-x","channel":"c","data":NaN}`,
	`{"event":"client-x","channel":"c","data":1.}`,
	"{\"event\":\"a\x01b\"}",
	`{"event":"a\qb"}`,
	`{"event":"a",}`,
	`{"event":"a"} x`,
	`{"event":"a"`,
	`[]`, `"s"`, `{}`, `null`, ``,
}

// DeepNesting is accepted by encoding/json (limit 10,000) and so by reverbgo, but fastjson
// refuses more than 300 levels: the one divergence parity_test.go expects.
var DeepNesting = `{"event":"client-x","channel":"c","data":` + strings.Repeat("[", 301) + strings.Repeat("]", 301) + `}`

// fixtureDir holds the Toolmark protocol's fixtures, as the bridge's own tests read them.
const fixtureDir = "../../bridge/testdata/fixtures"

// PageInputs are the page messages benchmarked: the hot one (a result with status ok) in its
// common shapes, then messages the fast paths leave to the reference decoder.
func PageInputs() ([]Input, error) {
	fx, err := pageFixtures()
	if err != nil {
		return nil, err
	}
	pick := func(name string) []byte { return fx[name] }
	in := []Input{
		{"result-ok", pick("valid-result-ok.json")},
		{"result-ok-no-data", pick("valid-result-ok-no-data.json")},
		{"result-ok-text", []byte(`{"protocol":1,"type":"result","clientId":"k7c1e0de-0000-4000-8000-000000000001","id":"c1",` +
			`"result":{"status":"ok","data":{"title":"Caf\u00e9 \"Le Zinc\"","notes":"line one\nline two","tags":["a","b"],"count":3}}}`)},
		{"result-ok-large", []byte(`{"protocol":1,"type":"result","clientId":"k7c1e0de-0000-4000-8000-000000000001","id":"c1",` +
			`"result":{"status":"ok","data":{"rows":[` + strings.Repeat(`{"id":12345,"name":"row name","ok":true,"score":0.75},`, 40) + `{}]}}}`)},
		{"result-error", pick("valid-result-error.json")},
		{"confirmed", pick("valid-confirmed.json")},
		{"manifest", pick("valid-manifest.json")},
	}
	for _, i := range in {
		if len(i.Body) == 0 {
			return nil, fmt.Errorf("fixture for %s missing in %s", i.Name, fixtureDir)
		}
	}
	return in, nil
}

// pageFixtures returns every page-to-server fixture, compacted as pages send it.
func pageFixtures() (map[string][]byte, error) {
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no fixtures in %s: %v", fixtureDir, err)
	}
	out := map[string][]byte{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var fx struct {
			Direction string          `json:"direction"`
			Message   json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal(raw, &fx); err != nil {
			return nil, fmt.Errorf("%s: %v", f, err)
		}
		if fx.Direction != "toAgent" {
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, fx.Message); err != nil {
			c.Reset()
			c.Write(fx.Message) // an invalid fixture may not compact: keep it as is
		}
		out[filepath.Base(f)] = c.Bytes()
	}
	return out, nil
}

// pageEdgeCases are for parity only (from bridge/fastjson_test.go's differential cases).
var pageEdgeCases = []string{
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":{"n":[1, 2, "<x>"]}}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"data":null,"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":1,"data":2}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"o\u006b"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"error","message":"m"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"i\u0064","result":{"status":"ok"}}`,
	`{"protocol":1.0,"type":"result","clientId":"a","id":"b","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok"},"x":1}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","id":"c","result":{"status":"ok"}}`,
	`{"Protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"Status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":"` + "\xff" + `"}}`,
	` {"protocol":1, "type":"result", "clientId":"a", "id":"b", "result":{"status":"ok", "data": [ ] } } `,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":` + strings.Repeat("[", 62) + strings.Repeat("]", 62) + `}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok"}} x`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":01}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":NaN}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":"` + "\x01" + `"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":"a\u2028b<&>"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":{"status":"ok","data":{"t":"` + "caf\u00e9 \u2028" + `"}}}`,
	`{"protocol":1,"type":"result","clientId":"a.b","id":"b","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":"b","result":[]}`,
	`{"protocol":"1","type":"result","clientId":"a","id":"b","result":{"status":"ok"}}`,
	`{"protocol":1,"type":"result","clientId":"a","id":1,"result":{"status":"ok"}}`,
	`[]`, `{`, ``, `null`,
}
