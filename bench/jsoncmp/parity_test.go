package jsoncmp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/reverbgo/reverbgo/bridge"
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
		checkPusher(t, []byte(c))
	}
	for _, in := range PusherInputs { // the benchmark inputs are all accepted
		if _, err := (StdPusher{}).Decode(in.Body); err != nil {
			t.Errorf("%s: %v", in.Name, err)
		}
	}
}

func checkPusher(t *testing.T, c []byte) {
	want, wantErr := StdPusher{}.Decode(c)
	for name, d := range pusherVariants() {
		got, err := d.Decode(c)
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

// FuzzPusherParity runs the parity check on generated frames (seeded with the table's cases).
// Frames nested deeper than fastjson's 300 levels are skipped: TestPusherDeepNesting covers them.
func FuzzPusherParity(f *testing.F) {
	for _, c := range pusherEdgeCases {
		f.Add([]byte(c))
	}
	for _, in := range PusherInputs {
		f.Add(in.Body)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if bridge.CheckDepth(b, 290) != nil {
			t.Skip()
		}
		checkPusher(t, b)
	})
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
	return map[string]PageDecoder{"sonic": SonicPage{}, "fastjson": &FastjsonPage{}}
}

// TestPageParity: every library variant decodes each page message exactly as the server's
// bridge.DecodePageMessage does (whose fast path bridge's TestFastDecoders and
// FuzzDecodePageMessage hold to the encoding/json reference): the same PageMessage, or an
// error with the same text.
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
		checkPage(t, []byte(c))
	}
}

func checkPage(t *testing.T, c []byte) {
	want, wantErr := OursPage{}.Decode(c)
	for name, d := range pageVariants() {
		got, err := d.Decode(c)
		if !sameError(err, wantErr) {
			t.Errorf("%s %q: error %v, reference error %v", name, c, err, wantErr)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %q:\n got %+v (result %s)\nwant %+v (result %s)", name, c, got, resultOf(got), want, resultOf(want))
		}
	}
}

func FuzzPageParity(f *testing.F) {
	for _, c := range pageEdgeCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkPage(t, b) })
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

// sameError: both nil, or the same text. The reference names the first unexpected property
// it meets in a Go map, so with several its choice varies from call to call: any one will do.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	const unexpected = "unexpected property"
	if strings.Contains(a.Error(), unexpected) && strings.Contains(b.Error(), unexpected) {
		return strings.SplitN(a.Error(), ":", 2)[0] == strings.SplitN(b.Error(), ":", 2)[0]
	}
	return a.Error() == b.Error()
}

func resultOf(m any) string {
	if m == nil {
		return ""
	}
	b, _ := json.Marshal(m)
	return string(b)
}
