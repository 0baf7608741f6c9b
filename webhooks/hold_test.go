package webhooks

import "testing"

// FuzzParseHold: whatever a shared store hands back, parseHold neither panics nor accepts
// something that does not encode back to the same member.
func FuzzParseHold(f *testing.F) {
	for _, h := range []Hold{
		{Kind: HoldVacated, App: "a", Channel: "c"},
		{Kind: HoldRemoved, App: "a", Channel: "presence-c", User: "u\x00with nul"},
		{Kind: HoldCount, App: "1", Channel: "private-x"},
	} {
		f.Add(h.member())
	}
	f.Add("x\x00a\x00c")
	f.Add("v\x00a")
	f.Fuzz(func(t *testing.T, s string) {
		h, ok := parseHold(s)
		if ok && h.member() != s {
			t.Fatalf("parseHold(%q) = %+v, which encodes as %q", s, h, h.member())
		}
	})
}
