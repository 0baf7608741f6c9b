package pusher

import (
	"encoding/json"
	"testing"
)

// FuzzDecodeResume: no subscribe data makes the resume decoder panic, and what it accepts
// is within its bounds.
func FuzzDecodeResume(f *testing.F) {
	for _, s := range []string{
		`{"channel":"a","resume":{"epoch":"e","serial":1}}`,
		`{"channel":"a","resume":{"epoch":"e","serial":0,"socket_id":"1.2"}}`,
		`"{\"channel\":\"a\",\"resume\":{\"epoch\":\"e\",\"serial\":3}}"`,
		`{"resume":null}`, `{"resume":"x"}`, `{"resume":{"epoch":"e","serial":-1}}`,
		`{"resume":{"epoch":"e","serial":1e3}}`, `{"resume":{"epoch":"e","serial":18446744073709551616}}`,
		`{"resume":{"epoch":"e","serial":1,"socket_id":null}}`, `{"resume":`, `resume`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeResume(json.RawMessage(b))
		if err != nil {
			return
		}
		if r.Epoch == "" || len(r.Epoch) > maxResumeEpoch || len(r.SocketID) > maxResumeSocketID || r.Serial > 1<<63-1 {
			t.Fatalf("accepted out of bounds: %+v from %q", r, b)
		}
	})
}
