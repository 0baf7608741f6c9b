package bridge

import (
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		p, name string
		want    bool
	}{
		{"notes.*", "notes.create", true},
		{"notes.*", "notes.a.b", true},
		{"notes.*", "notes.", true},
		{"notes.*", "notes", false},
		{"notes.*", "inbox.notes.x", false},
		{"*", "anything", true},
		{"*.read", "inbox.read", true},
		{"*.read", "inbox.reader", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a**", "a", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"x*x*x*x*y", strings.Repeat("x", 128), false},
	} {
		if got := globMatch(tc.p, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.p, tc.name, got, tc.want)
		}
	}
}

func TestAccessCheck(t *testing.T) {
	yes := true
	ro := &Tool{Name: "notes.list", Hints: Hints{ReadOnly: &yes}}
	rw := &Tool{Name: "notes.create"}
	other := &Tool{Name: "inbox.read", Hints: Hints{ReadOnly: &yes}}
	for _, tc := range []struct {
		name          string
		scopes, tools []string
		want          [3]Denial // ro, rw, other
	}{
		{"absent = all", nil, nil, [3]Denial{Allowed, Allowed, Allowed}},
		{"read", []string{ScopeRead}, nil, [3]Denial{Allowed, DeniedScope, Allowed}},
		{"write", []string{ScopeWrite}, nil, [3]Denial{Allowed, Allowed, Allowed}},
		{"read and write", []string{ScopeRead, ScopeWrite}, nil, [3]Denial{Allowed, Allowed, Allowed}},
		{"no scope at all", []string{}, nil, [3]Denial{DeniedScope, DeniedScope, DeniedScope}},
		{"other scopes only", []string{"openid", "profile"}, nil, [3]Denial{DeniedScope, DeniedScope, DeniedScope}},
		{"globs", nil, []string{"notes.*"}, [3]Denial{Allowed, Allowed, DeniedTool}},
		{"empty globs", nil, []string{}, [3]Denial{DeniedTool, DeniedTool, DeniedTool}},
		{"read and globs", []string{ScopeRead}, []string{"notes.*"}, [3]Denial{Allowed, DeniedScope, DeniedTool}},
		{"exact name", []string{ScopeWrite}, []string{"notes.create"}, [3]Denial{DeniedTool, Allowed, DeniedTool}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := NewAccess(tc.scopes, tc.tools, false)
			if err != nil {
				t.Fatal(err)
			}
			for i, tool := range []*Tool{ro, rw, other} {
				if got := a.Check(tool); got != tc.want[i] {
					t.Errorf("%s: %v, want %v", tool.Name, got, tc.want[i])
				}
			}
		})
	}
	var zero Access
	if !zero.Unrestricted() || zero.Check(rw) != Allowed || (*Access)(nil).Check(rw) != Allowed {
		t.Fatal("the zero Access must allow everything")
	}
}

func TestNewAccessRejects(t *testing.T) {
	many := make([]string, MaxToolPatterns+1)
	for i := range many {
		many[i] = "a"
	}
	for _, tc := range []struct {
		name          string
		scopes, tools []string
	}{
		{"unknown scope (strict)", []string{"admin"}, nil},
		{"empty pattern", nil, []string{""}},
		{"pattern with a space", nil, []string{"a b"}},
		{"pattern with ?", nil, []string{"a?"}},
		{"pattern too long", nil, []string{strings.Repeat("a", 129)}},
		{"too many patterns", nil, many},
	} {
		if _, err := NewAccess(tc.scopes, tc.tools, true); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if _, err := NewAccess([]string{"openid", ScopeRead}, nil, false); err != nil {
		t.Errorf("a token's other scopes must be ignored: %v", err)
	}
}

func TestParseScope(t *testing.T) {
	rw := &Tool{Name: "x"}
	for _, tc := range []struct {
		scope   string
		present bool
		want    Denial
	}{
		{"", false, Allowed},
		{"", true, DeniedScope},
		{"openid toolmark:read", true, DeniedScope},
		{"openid  toolmark:write ", true, Allowed},
	} {
		a, err := ParseScope(tc.scope, tc.present, nil)
		if err != nil || a.Check(rw) != tc.want {
			t.Errorf("ParseScope(%q, %v): %v %v, want %v", tc.scope, tc.present, a.Check(rw), err, tc.want)
		}
	}
}
