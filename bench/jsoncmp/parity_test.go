package jsoncmp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// pusherVariants are the decoders compared; StdPusher is the reference.
func pusherVariants() map[string]PusherDecoder {
	return map[string]PusherDecoder{"ours": OursPusher{}, "sonic": SonicPusher{}, "fastjson": &FastjsonPusher{}}
}

// sameJSON reports whether two JSON texts hold the same value (for fastjson's re-serialized Data).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// TestPusherParity: every variant accepts exactly what encoding/json (the reference, i.e.
// what DecodeClientMessage/DecodeSubscribe do without the fast path) accepts and extracts the
// same fields; Data byte for byte, except fastjson's, which is compared as a value.
func TestPusherParity(t *testing.T) {
	cases := append([]string{}, pusherEdgeCases...)
	for _, in := range PusherInputs {
		cases = append(cases, string(in.Body))
	}
	for _, c := range cases {
		want, wantErr := StdPusher{}.Decode([]byte(c))
		for name, d := range pusherVariants() {
			got, err := d.Decode([]byte(c))
			if (err != nil) != (wantErr != nil) {
				t.Errorf("%s %q: error %v, reference error %v", name, c, err, wantErr)
				continue
			}
			dataOK := bytes.Equal(got.Data, want.Data)
			if name == "fastjson" {
				dataOK = sameJSON(got.Data, want.Data)
			}
			if got.Event != want.Event || got.Channel != want.Channel || got.Sub != want.Sub || !dataOK {
				t.Errorf("%s %q:\n got %+v (data %s)\nwant %+v (data %s)", name, c, got, got.Data, want, want.Data)
			}
		}
	}
	for _, in := range PusherInputs { // the benchmark inputs are all accepted
		if _, err := (StdPusher{}).Decode(in.Body); err != nil {
			t.Errorf("%s: %v", in.Name, err)
		}
	}
}

// TestPusherDeepNesting records the one known divergence: fastjson refuses more than 300
// levels that encoding/json (and so reverbgo) accepts and relays.
func TestPusherDeepNesting(t *testing.T) {
	if _, err := (StdPusher{}).Decode([]byte(DeepNesting)); err != nil {
		t.Fatalf("reference refused: %v", err)
	}
	for name, d := range pusherVariants() {
		_, err := d.Decode([]byte(DeepNesting))
		if (err != nil) != (name == "fastjson") {
			t.Errorf("%s: error %v; only fastjson is expected to refuse", name, err)
		}
	}
}

func pageVariants() map[string]PageDecoder {
	return map[string]PageDecoder{"ours": OursPage{}, "sonic": SonicPage{}, "fastjson": &FastjsonPage{}}
}

// TestPageParity: every variant decodes each page message exactly as the reference decoder
// (bridge.ReferenceDecodePageMessage) does: the same PageMessage, or an error with the same text.
func TestPageParity(t *testing.T) {
	fx, err := pageFixtures()
	if err != nil {
		t.Fatal(err)
	}
	cases := append([]string{}, pageEdgeCases...)
	for _, b := range fx {
		cases = append(cases, string(b))
	}
	in, err := PageInputs()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range in {
		cases = append(cases, string(i.Body))
	}
	for _, c := range cases {
		want, wantErr := RefPage{}.Decode([]byte(c))
		for name, d := range pageVariants() {
			got, err := d.Decode([]byte(c))
			if (err != nil) != (wantErr != nil) || (err != nil && err.Error() != wantErr.Error()) {
				t.Errorf("%s %q: error %v, reference error %v", name, c, err, wantErr)
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s %q:\n got %+v (result %s)\nwant %+v (result %s)", name, c, got, resultOf(got), want, resultOf(want))
			}
		}
	}
}

// TestFastPathsTakeTheHotMessage: the library fast paths really decode the common result
// messages themselves (a benchmark of a fast path that always declines would measure the
// reference). result-ok-text has escapes, which fastjson must decline.
func TestFastPathsTakeTheHotMessage(t *testing.T) {
	in, err := PageInputs()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range in {
		hot := i.Name == "result-ok" || i.Name == "result-ok-no-data" || i.Name == "result-ok-large" || i.Name == "result-ok-text"
		if _, ok := sonicFast(i.Body); ok != hot {
			t.Errorf("sonic fast path on %s: %v, want %v", i.Name, ok, hot)
		}
		var f FastjsonPage
		if _, ok := f.fast(i.Body); ok != (hot && i.Name != "result-ok-text") {
			t.Errorf("fastjson fast path on %s: %v", i.Name, ok)
		}
	}
}

func resultOf(m any) string {
	if m == nil {
		return ""
	}
	b, _ := json.Marshal(m)
	return string(b)
}
