package auth

import "testing"

// Credentials of the Pusher documentation's worked examples.
const (
	docKey    = "278d425bdf160c739803"
	docSecret = "7ad3773142a6692b25b8"
	docSocket = "1234.1234"
)

const (
	presenceData = `{"user_id":10,"user_info":{"name":"Mr. Channels"}}`
	userData     = `{"id":"12345"}`
)

func TestHMACHex(t *testing.T) {
	// RFC 4231 test case 2, so the primitive is pinned independently of Pusher's vectors.
	got := HMACHex("Jefe", []byte("what do ya want for nothing?"))
	want := "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got != want {
		t.Fatalf("HMACHex = %s, want %s", got, want)
	}
	if WebhookSignature("Jefe", []byte("what do ya want for nothing?")) != want {
		t.Fatal("WebhookSignature must be HMAC-SHA256 of the body")
	}
}

func TestEqual(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"", "", true},
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"abc", "ab", false},
		{"", "a", false},
	}
	for _, tt := range tests {
		if got := Equal(tt.a, tt.b); got != tt.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

// TestSignatureVectors checks every signature vector of docs/pusher-protocol.md.
func TestSignatureVectors(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"private-foobar", ChannelSignature(docSecret, docSocket, "private-foobar"),
			"58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"},
		{"signin user_data", SigninSignature(docSecret, docSocket, userData),
			"4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"},
		{"presence-foobar", PresenceSignature(docSecret, docSocket, "presence-foobar", presenceData),
			"31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, tt.got, tt.want)
		}
	}
}

func TestVerifyChannel(t *testing.T) {
	private := docKey + ":58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4"
	presence := docKey + ":31935e7d86dba64c2a90aed31fdc61869f9b22ba9d8863bba239c03ca481bc80"
	tests := []struct {
		name                          string
		key, secret, socket, ch, data string
		auth                          string
		want                          bool
	}{
		{"private ok", docKey, docSecret, docSocket, "private-foobar", "", private, true},
		{"presence ok", docKey, docSecret, docSocket, "presence-foobar", presenceData, presence, true},
		{"wrong key prefix", "otherkey", docSecret, docSocket, "private-foobar", "", private, false},
		{"wrong secret", docKey, "nope", docSocket, "private-foobar", "", private, false},
		{"other socket", docKey, docSecret, "1234.1235", "private-foobar", "", private, false},
		{"other channel", docKey, docSecret, docSocket, "private-foobaz", "", private, false},
		{"presence data altered", docKey, docSecret, docSocket, "presence-foobar",
			`{"user_id":11,"user_info":{"name":"Mr. Channels"}}`, presence, false},
		{"presence data re-encoded", docKey, docSecret, docSocket, "presence-foobar",
			`{"user_id": 10, "user_info": {"name": "Mr. Channels"}}`, presence, false},
		{"private sig for presence", docKey, docSecret, docSocket, "private-foobar", presenceData, private, false},
		{"no colon", docKey, docSecret, docSocket, "private-foobar", "",
			"58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4", false},
		{"empty auth", docKey, docSecret, docSocket, "private-foobar", "", "", false},
		{"key only", docKey, docSecret, docSocket, "private-foobar", "", docKey + ":", false},
		{"uppercase hex", docKey, docSecret, docSocket, "private-foobar", "",
			docKey + ":58DF8B0C36D6982B82C3ECF6B4662E34FE8C25BBA48F5369F135BF843651C3A4", false},
		{"trailing garbage", docKey, docSecret, docSocket, "private-foobar", "", private + "00", false},
		{"empty secret never verifies", docKey, "", docSocket, "private-foobar", "",
			docKey + ":" + ChannelSignature("", docSocket, "private-foobar"), false},
		{"empty key never verifies", "", docSecret, docSocket, "private-foobar", "",
			":58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4", false},
		{"signin sig is not a channel sig", docKey, docSecret, docSocket, "private-foobar", "",
			docKey + ":" + SigninSignature(docSecret, docSocket, "private-foobar"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VerifyChannel(tt.key, tt.secret, tt.socket, tt.ch, tt.data, tt.auth); got != tt.want {
				t.Fatalf("VerifyChannel = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestVerifySignin(t *testing.T) {
	good := docKey + ":4708d583dada6a56435fb8bc611c77c359a31eebde13337c16ab43aa6de336ba"
	tests := []struct {
		name                      string
		key, secret, socket, data string
		auth                      string
		want                      bool
	}{
		{"ok", docKey, docSecret, docSocket, userData, good, true},
		{"wrong key", "x", docSecret, docSocket, userData, good, false},
		{"wrong secret", docKey, "x", docSocket, userData, good, false},
		{"other socket", docKey, docSecret, "1.1", userData, good, false},
		{"other user", docKey, docSecret, docSocket, `{"id":"12346"}`, good, false},
		{"channel sig is not a signin sig", docKey, docSecret, docSocket, userData,
			docKey + ":" + ChannelSignature(docSecret, docSocket, userData), false},
		{"malformed", docKey, docSecret, docSocket, userData, "garbage", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := VerifySignin(tt.key, tt.secret, tt.socket, tt.data, tt.auth); got != tt.want {
				t.Fatalf("VerifySignin = %v, want %v", got, tt.want)
			}
		})
	}
}
