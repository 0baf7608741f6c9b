package bridge

import (
	"encoding/json"
	"testing"
	"time"
)

// Fuzz targets; their seed corpora (the fixtures and a few edge cases) run as normal tests.
// Run longer with: go test ./bridge -run '^$' -fuzz FuzzDecodePageMessage

func FuzzDecodePageMessage(f *testing.F) {
	for _, fx := range loadFixtures(f) {
		f.Add([]byte(fx.message))
	}
	for _, s := range []string{``, `{}`, `[`, `"`, `{"protocol":1}`, "\xff", `{"a":"\\"}`,
		`{"protocol":1.0,"type":"changed","clientId":"a","rev":1e2}`} {
		f.Add([]byte(s))
	}
	for _, s := range fastDecodeCases {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFastPageDecoder(t, b) // the single-pass path agrees with the reference
		m, err := DecodePageMessage(b)
		if err != nil {
			if _, ok := err.(*ProtocolError); !ok {
				t.Fatalf("error %T is not a *ProtocolError", err)
			}
			return
		}
		// Whatever is accepted is internally consistent and safe to store and forward.
		if !ValidID(m.ClientID) {
			t.Fatalf("accepted clientId %q", m.ClientID)
		}
		switch m.Type {
		case TypeResult, TypeConfirmed:
			if !json.Valid(m.Result) || CheckDepth(m.Result, MaxDepth) != nil {
				t.Fatalf("accepted result %q", m.Result)
			}
			if m.Status == StatusNeedsConfirmation && !ValidID(m.ResultConfirmID) {
				t.Fatalf("accepted confirmId %q", m.ResultConfirmID)
			}
			if m.Type == TypeResult && !ValidID(m.ID) || m.Type == TypeConfirmed && !ValidID(m.ConfirmID) {
				t.Fatalf("accepted id %q/%q", m.ID, m.ConfirmID)
			}
		case TypeManifest:
			if len(m.Tools) > MaxTools || m.Rev < 0 {
				t.Fatalf("accepted manifest %+v", m)
			}
			if _, err := json.Marshal(Manifest{ClientID: m.ClientID, Rev: m.Rev, Tools: m.Tools}); err != nil {
				t.Fatal(err)
			}
		case TypeChanged:
			if m.Rev < 0 {
				t.Fatalf("accepted rev %d", m.Rev)
			}
		default:
			t.Fatalf("accepted type %q", m.Type)
		}
	})
}

func FuzzDecodeCallRequest(f *testing.F) {
	for _, s := range []string{
		callBody,
		`{"user_id":"u1","conversation_id":"c1","tool":"x","input":null,"rev":null,"tool_use_id":null,"timeout_ms":null}`,
		`{"user_id":"u1","conversation_id":"c1","tool":"x","timeout_ms":600000}`,
		`{"user_id":"u.1","conversation_id":"c1","tool":"x"}`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s), false)
	}
	for _, fx := range loadFixtures(f) {
		f.Add([]byte(fx.message), true)
	}
	for _, s := range fastDecodeCases {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, b []byte, describe bool) {
		kind := KindCall
		if describe {
			kind = KindDescribe
		}
		checkFastCallDecoder(t, b, kind) // the single-pass path agrees with the reference
		req, err := decodeCallRequest(b, kind, 10*time.Minute)
		if err != nil {
			if _, ok := err.(*ProtocolError); !ok {
				t.Fatalf("error %T is not a *ProtocolError", err)
			}
			return
		}
		if !ValidChannelPart(req.UserID) || !ValidChannelPart(req.ConversationID) || !ValidToolName(req.Tool) {
			t.Fatalf("accepted %+v", req)
		}
		if req.Timeout < 0 || req.Timeout > 10*time.Minute || req.Rev != nil && *req.Rev < 0 {
			t.Fatalf("accepted %+v", req)
		}
		// Everything accepted must encode to a valid call the page accepts.
		if _, err := EncodeCall("client", "id", req.Tool, req.Rev, req.Input); err != nil {
			t.Fatalf("accepted request cannot be encoded: %v", err)
		}
	})
}
