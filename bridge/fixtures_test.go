package bridge

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The protocol's own vectors (adams100111/toolmark) are copied into testdata/fixtures so CI
// always has them; when the shared copy is present the two must be identical.
const (
	fixtureDir       = "testdata/fixtures"
	sharedFixtureDir = "../../shared/toolmark/fixtures"
)

type fixture struct {
	name      string
	direction string
	message   json.RawMessage
	valid     bool
}

func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtureDir, err)
	}
	var out []fixture
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var fx struct {
			Direction string          `json:"direction"`
			Message   json.RawMessage `json:"message"`
		}
		if err := json.Unmarshal(raw, &fx); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		name := filepath.Base(f)
		valid := strings.HasPrefix(name, "valid-")
		if !valid && !strings.HasPrefix(name, "invalid-") {
			t.Fatalf("%s: name must start with valid- or invalid-", name)
		}
		if fx.Direction != "toAgent" && fx.Direction != "toPage" {
			t.Fatalf("%s: unknown direction %q", name, fx.Direction)
		}
		out = append(out, fixture{name, fx.Direction, fx.Message, valid})
	}
	return out
}

func TestFixturesMatchShared(t *testing.T) {
	shared, err := filepath.Glob(filepath.Join(sharedFixtureDir, "*"))
	if err != nil || len(shared) == 0 {
		t.Skip("shared fixtures not present; testdata copy is authoritative")
	}
	local, _ := filepath.Glob(filepath.Join(fixtureDir, "*"))
	if len(local) != len(shared) {
		t.Fatalf("%d local fixture files, %d shared", len(local), len(shared))
	}
	for _, s := range shared {
		want, _ := os.ReadFile(s)
		got, err := os.ReadFile(filepath.Join(fixtureDir, filepath.Base(s)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s differs from the shared copy (%v)", filepath.Base(s), err)
		}
	}
}

// TestFixtures checks every vector: page-to-server ones through the decoder and the page
// endpoint (valid → accepted by the decoder, invalid → 422), server-to-page ones through the
// server's own validator, and valid server-to-page ones re-encoded by the server's encoder.
func TestFixtures(t *testing.T) {
	fixtures := loadFixtures(t)
	h := newHarness(t, nil)
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) {
			switch fx.direction {
			case "toAgent":
				_, err := DecodePageMessage(fx.message)
				if fx.valid != (err == nil) {
					t.Fatalf("DecodePageMessage valid=%v err=%v", fx.valid, err)
				}
				// The endpoint's answer: invalid → 422; valid → anything but 422 (the ids in
				// fixtures are not bound, so a result is 404, a changed 403, a manifest 204).
				code := h.page("1.1", "c1", string(fx.message)).Code
				if !fx.valid && code != http.StatusUnprocessableEntity {
					t.Fatalf("endpoint answered %d to an invalid message", code)
				}
				if fx.valid && code == http.StatusUnprocessableEntity {
					t.Fatalf("endpoint answered 422 to a valid message")
				}
				// A page-to-server message is never valid in the other direction.
				if err := ValidateToPage(fx.message); fx.valid && err == nil {
					t.Fatalf("ValidateToPage accepted a page-to-server message")
				}
			case "toPage":
				err := ValidateToPage(fx.message)
				if fx.valid != (err == nil) {
					t.Fatalf("ValidateToPage valid=%v err=%v", fx.valid, err)
				}
				if fx.valid {
					if _, err := DecodePageMessage(fx.message); err == nil {
						t.Fatalf("DecodePageMessage accepted a server-to-page message")
					}
					checkEncoderReproduces(t, fx.message)
				}
			}
		})
	}
}

// checkEncoderReproduces re-encodes a valid server-to-page vector with the server's encoder and
// checks the result is semantically identical (and, by construction, valid).
func checkEncoderReproduces(t *testing.T, msg json.RawMessage) {
	t.Helper()
	var m wireMsg // the harness's decoded server-to-page message
	if err := json.Unmarshal(msg, &m); err != nil {
		t.Fatal(err)
	}
	var out []byte
	var err error
	switch m.Type {
	case TypeCall:
		out, err = EncodeCall(m.ClientID, m.ID, m.Tool, m.Rev, m.Input)
	case TypeDescribe:
		out, err = EncodeDescribe(m.ClientID, m.ID, m.Tool)
	case TypeCancel:
		out, err = EncodeCancel(m.ClientID, m.ID)
	}
	if err != nil {
		t.Fatalf("encoder refused: %v", err)
	}
	var a, b any
	_ = json.Unmarshal(msg, &a)
	_ = json.Unmarshal(out, &b)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("encoder produced %s, fixture %s", out, msg)
	}
}

// TestEncoderNeverEmitsInvalid: what the invalid server-to-page vectors get wrong, the encoder
// refuses to produce.
func TestEncoderNeverEmitsInvalid(t *testing.T) {
	rev := int64(-1)
	for name, f := range map[string]func() ([]byte, error){
		"empty id":      func() ([]byte, error) { return EncodeDescribe(client1, "", "x") },
		"bad clientId":  func() ([]byte, error) { return EncodeCancel("", "c1") },
		"negative rev":  func() ([]byte, error) { return EncodeCall(client1, "c1", "x", &rev, nil) },
		"bad tool":      func() ([]byte, error) { return EncodeCall(client1, "c1", "a b", nil, nil) },
		"invalid input": func() ([]byte, error) { return EncodeCall(client1, "c1", "x", nil, json.RawMessage("{")) },
		"input too deep": func() ([]byte, error) {
			return EncodeCall(client1, "c1", "x", nil, json.RawMessage(strings.Repeat("[", 64)+strings.Repeat("]", 64)))
		},
		"empty tool name": func() ([]byte, error) { return EncodeDescribe(client1, "c1", "") },
	} {
		if out, err := f(); err == nil {
			t.Errorf("%s: encoder emitted %s", name, out)
		}
	}
	out, err := EncodeCall(client1, "c1", "x", nil, nil)
	if err != nil || string(out) != `{"protocol":1,"type":"call","clientId":"`+client1+`","id":"c1","tool":"x","input":null}` {
		t.Fatalf("call without input: %s %v", out, err)
	}
}
