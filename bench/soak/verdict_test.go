package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// The verdict fails on each broken criterion and passes when all hold.
func TestVerdict(t *testing.T) {
	o := options{rssTolerance: 0.10, goroutineSlack: 10}
	flat := []row{{time.Minute, 100 << 20, 30}, {2 * time.Minute, 105 << 20, 31}, {3 * time.Minute, 98 << 20, 30}}
	observer := map[string]bool{"observer": true}
	for _, tc := range []struct {
		name       string
		rows       []row
		members    map[string]bool
		mod        func(s *soak, subs []*subscriber)
		idleAfter  float64
		wantFailOn string // "" = PASS
	}{
		{"all hold", flat, observer, nil, 18, ""},
		{"RSS grows 20 %", []row{{time.Minute, 100 << 20, 30}, {2 * time.Minute, 120 << 20, 30}}, observer, nil, 18, "FAIL RSS"},
		{"goroutines leak under load", []row{{time.Minute, 100 << 20, 30}, {2 * time.Minute, 100 << 20, 300}}, observer, nil, 18, "FAIL goroutines under load"},
		{"goroutines left when idle", flat, observer, nil, 60, "FAIL goroutines idle"},
		{"a fan-out event lost", flat, observer, func(s *soak, subs []*subscriber) { s.c.fanPub.Add(1) }, 18, "FAIL fan-out"},
		{"a client event lost", flat, observer, func(s *soak, _ []*subscriber) { s.c.ceSent.Add(1) }, 18, "FAIL client events"},
		{"a member left behind", flat, map[string]bool{"observer": true, "joiner-3": true}, nil, 18, "FAIL presence"},
		{"a bridge call failed", flat, observer, func(s *soak, _ []*subscriber) { s.c.callFail.Add(1) }, 18, "FAIL bridge"},
		{"a long-lived socket dropped", flat, observer, func(s *soak, _ []*subscriber) { s.c.subErr.Add(1) }, 18, "FAIL churn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := &soak{out: &out}
			s.c.callOK.Add(5)
			subs := []*subscriber{{}}
			if tc.mod != nil {
				tc.mod(s, subs)
			}
			ok := s.verdict(o, tc.rows, subs, nil, tc.members, true, 17, tc.idleAfter)
			if tc.wantFailOn == "" {
				if !ok || !strings.HasSuffix(out.String(), "PASS\n") {
					t.Fatalf("want PASS:\n%s", out.String())
				}
				return
			}
			if ok || !strings.Contains(out.String(), tc.wantFailOn) {
				t.Fatalf("want %q:\n%s", tc.wantFailOn, out.String())
			}
		})
	}
}
