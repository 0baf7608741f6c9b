package pusher

import (
	"encoding/json"
	"reflect"
	"testing"
)

var decodeSeeds = []string{
	`{"event":"pusher:subscribe","data":{"auth":"","channel":"bench-1"}}`,
	` { "event" : "pusher:subscribe" , "data" : { "channel" : "a" , "auth" : "k:sig" , "channel_data" : "{\"user_id\":1}" } } `,
	`{"event":"client-x","channel":"private-a","data":"{\"a\":1}"}`,
	`{"event":"client-x","channel":"private-a","data":[1,{"b":"}"},"x\"y"],"data":null}`,
	`{"event":"pusher:ping","data":{}}`,
	`{"Event":"pusher:ping"}`,
	`{"event":"caf\u00e9","data":1}`,
	"{\"event\":\"caf\xc3\xa9\",\"data\":true}",
	"{\"event\":\"bad\xff\"}",
	`{"event":null,"channel":"a"}`,
	`{"event":1}`,
	`{"event":"a","event":"b","extra":{"x":[]}}`,
	`{"data":-1.5e3,"event":"e"}`,
	`[]`, `"s"`, `{}`, `{"event":"a"`, `{"event":"a",}`, ``,
	`{"channel":"presence-r","auth":"k:s","channel_data":"{\"user_id\":\"7\",\"user_info\":{\"name\":\"Zo\u00eb \ud83d\ude00\"}}"}`,
	`{"channel":"presence-r","channel_data":"lone \ud800 surrogate"}`,
	"{\"channel\":\"caf\xc3\xa9\",\"auth\":\"bad\xff\"}",
	`{"channel":"a\/b\n","auth":"\"quoted\""}`,
}

// FuzzDecodeFast checks that the fast paths decode exactly as encoding/json does.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast ClientMessage
		if fastClientMessage(b, &fast) {
			var slow ClientMessage
			if err := json.Unmarshal(b, &slow); err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", b, fast, slow, err)
			}
		}
		var fs SubscribeData
		if fastSubscribe(b, &fs) {
			var slow SubscribeData
			if err := json.Unmarshal(b, &slow); err != nil || fs != slow {
				t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", b, fs, slow, err)
			}
		}
	})
}

func TestDecodeFastTakesCommonShape(t *testing.T) {
	var m ClientMessage
	if !fastClientMessage([]byte(decodeSeeds[0]), &m) || m.Event != "pusher:subscribe" || string(m.Data) != `{"auth":"","channel":"bench-1"}` {
		t.Fatalf("fast path missed the pusher-js subscribe: %+v", m)
	}
	var s SubscribeData
	if !fastSubscribe(m.Data, &s) || s.Channel != "bench-1" {
		t.Fatalf("fast path missed subscribe data: %+v", s)
	}
}

// A presence subscribe (channel_data is JSON in a string, so it has escapes) and non-ASCII
// values stay on the fast path, decoded as encoding/json decodes them.
func TestDecodeFastTakesEscapedStrings(t *testing.T) {
	for _, in := range decodeSeeds[len(decodeSeeds)-4:] {
		var fast, slow SubscribeData
		if !fastSubscribe([]byte(in), &fast) {
			t.Fatalf("fast path refused %q", in)
		}
		if err := json.Unmarshal([]byte(in), &slow); err != nil || fast != slow {
			t.Fatalf("%q: fast %+v, encoding/json %+v (%v)", in, fast, slow, err)
		}
	}
}
