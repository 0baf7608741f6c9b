package pusher

import (
	"maps"
	"strconv"
	"testing"
)

// TestSubSet checks subSet against a map through each size it passes: in the slice, at the
// switch to a map and in the map, with replacements and deletions.
func TestSubSet(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int // channels added
		del  []int
	}{
		{"empty", 0, nil},
		{"one", 1, nil},
		{"one deleted", 1, []int{0}},
		{"small", subSetSmall, []int{0, 3}},
		{"outgrown", subSetSmall + 1, []int{subSetSmall, 1}},
		{"large", 40, []int{0, 39, 17}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s subSet
			want := map[string]subscription{}
			for i := range tc.n {
				name := "ch-" + strconv.Itoa(i)
				s.set(name, subscription{userID: "u"})
				s.set(name, subscription{userID: "u" + strconv.Itoa(i)}) // a replacement
				want[name] = subscription{userID: "u" + strconv.Itoa(i)}
			}
			for _, i := range tc.del {
				name := "ch-" + strconv.Itoa(i)
				if got, ok := s.del(name); !ok || got != want[name] {
					t.Fatalf("del(%s) = %v, %v; want %v", name, got, ok, want[name])
				}
				delete(want, name)
				if _, ok := s.del(name); ok {
					t.Fatalf("del(%s) twice succeeded", name)
				}
			}
			if s.len() != len(want) {
				t.Fatalf("len %d, want %d", s.len(), len(want))
			}
			if got := maps.Collect(s.all()); !maps.Equal(got, want) {
				t.Fatalf("all() = %v, want %v", got, want)
			}
			for name, sub := range want {
				if got, ok := s.get(name); !ok || got != sub {
					t.Fatalf("get(%s) = %v, %v", name, got, ok)
				}
			}
			if _, ok := s.get("absent"); ok {
				t.Fatal("get(absent) succeeded")
			}
		})
	}
}
