package origin

import (
	"strings"
	"testing"
	"time"
)

func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		pattern, origin string
		want            bool
	}{
		{"*", "https://anything.test", true},
		{"*", "null", true},
		// Bare host: any scheme and port (Reverb's form).
		{"app.example.com", "https://app.example.com", true},
		{"app.example.com", "http://app.example.com:8080", true},
		{"app.example.com", "https://APP.Example.com", true},
		{"APP.example.COM", "https://app.example.com", true},
		{"app.example.com", "https://app.example.com.evil.test", false},
		{"app.example.com", "https://evilapp.example.com", false},
		{"app.example.com", "https://x.app.example.com", false},
		{"app.example.com", "app.example.com", true}, // a non-browser client's bare host
		// Host and port.
		{"app.example.com:8080", "http://app.example.com:8080", true},
		{"app.example.com:8080", "https://app.example.com:8081", false},
		{"app.example.com:8080", "https://app.example.com", false},
		{"localhost:443", "https://localhost", true},
		// URL forms: scheme, host and the scheme's default port unless a port is given.
		{"https://app.example.com", "https://app.example.com", true},
		{"https://app.example.com", "https://app.example.com:443", true},
		{"https://app.example.com/", "https://app.example.com", true},
		{"https://app.example.com", "http://app.example.com", false},
		{"https://app.example.com", "https://app.example.com:8443", false},
		{"https://app.example.com", "app.example.com", false},
		{"HTTPS://app.example.com", "https://app.example.com", true},
		{"https://app.example.com:8443", "https://app.example.com:8443", true},
		{"https://app.example.com:8443", "https://app.example.com", false},
		{"http://localhost:5173", "http://localhost:5173", true},
		// Wildcard subdomains.
		{"*.example.com", "https://a.example.com", true},
		{"*.example.com", "http://a.b.example.com:3000", true},
		{"*.example.com", "https://example.com", false},
		{"*.example.com", "https://.example.com", false},
		{"*.example.com", "https://aexample.com", false},
		{"*.example.com", "https://a.example.com.evil.test", false},
		{"https://*.example.com", "https://a.example.com", true},
		{"https://*.example.com", "http://a.example.com", false},
		{"https://*.example.com", "https://a.example.com:444", false},
		{"https://*.example.com:444", "https://a.example.com:444", true},
		// IPv6.
		{"[::1]:8080", "http://[::1]:8080", true},
		{"[::1]", "http://[::1]:9", true},
		{"http://[::1]", "http://[::1]", true},
		// Invalid patterns never match; invalid origins match only "*".
		{"app-*.example.com", "https://app-1.example.com", false},
		{"*example.com", "https://example.com", false},
		{"", "https://example.com", false},
		{"https://", "https://", false},
		{"app.example.com:http", "https://app.example.com", false},
		{"app.example.com", "https://app.example.com/path", false},
		{"app.example.com", "https://user@app.example.com", false},
		{"app.example.com", "https://app.example.com:99999999", false},
		{"app.example.com", "null", false},
	} {
		if got := Allowed([]string{tc.pattern}, tc.origin); got != tc.want {
			t.Errorf("Allowed(%q, %q) = %v, want %v", tc.pattern, tc.origin, got, tc.want)
		}
	}
}

func TestAllowedListAndEmpty(t *testing.T) {
	if !Allowed(nil, "https://x.test") || !Allowed([]string{"a.test"}, "") {
		t.Fatal("an empty list or an absent Origin must be allowed")
	}
	list := []string{"bad-*.x", "a.test", "https://b.test"}
	if !Allowed(list, "http://a.test") || !Allowed(list, "https://b.test") || Allowed(list, "http://b.test") {
		t.Fatal("list semantics")
	}
}

func TestValidate(t *testing.T) {
	for p, ok := range map[string]bool{
		"*": true, "app.example.com": true, "*.example.com": true, "https://app.example.com": true,
		"https://*.example.com:8443": true, "localhost:3000": true, "[::1]:80": true,
		"": false, "app-*.example.com": false, "**.x": false, "https://": false,
		"ht tp://x": false, "x:port": false, "a/b": false, "::1": false, "*.": false,
	} {
		if err := Validate(p); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", p, err, ok)
		}
	}
}

// TestHostileOriginIsLinear: a long Origin crafted against backtracking globs is answered
// at once.
func TestHostileOriginIsLinear(t *testing.T) {
	patterns := []string{"*.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.b", "https://*.example.com"}
	hostile := "https://" + strings.Repeat("a.", 200_000) + "c"
	start := time.Now()
	for i := 0; i < 10; i++ {
		if Allowed(patterns, hostile) {
			t.Fatal("matched")
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("10 hostile matches took %v", d)
	}
}

func TestAllowedDoesNotAllocate(t *testing.T) {
	patterns := []string{"https://*.example.com", "app.example.com:8080"}
	if n := testing.AllocsPerRun(100, func() { Allowed(patterns, "https://a.example.com") }); n != 0 {
		t.Fatalf("%v allocations per match", n)
	}
}

// FuzzAllowed: no input panics; matching ignores case; "*" matches everything; a wildcard
// never matches its bare domain; a valid bare-host pattern matches itself under any scheme.
func FuzzAllowed(f *testing.F) {
	for _, s := range [][2]string{
		{"*.example.com", "https://a.example.com"}, {"https://app.example.com:8443", "https://app.example.com:8443"},
		{"[::1]", "http://[::1]:80"}, {"a", "b"}, {"*.", "https://."}, {"", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, origin string) {
		got := Allowed([]string{pattern}, origin)
		if Allowed([]string{strings.ToUpper(pattern)}, strings.ToUpper(origin)) != got && isASCII(pattern+origin) {
			t.Fatalf("case changes the answer for %q %q", pattern, origin)
		}
		if !Allowed([]string{"*"}, origin) {
			t.Fatal(`"*" refused`)
		}
		if strings.HasPrefix(pattern, "*.") && Validate(pattern) == nil {
			bare := strings.TrimPrefix(pattern, "*.")
			if Allowed([]string{pattern}, "https://"+bare) && !strings.Contains(bare, "://") {
				t.Fatalf("%q matched its bare domain", pattern)
			}
		}
		if Validate(pattern) == nil && !strings.Contains(pattern, "://") && !strings.Contains(pattern, "*") && !strings.Contains(pattern, ":") {
			host := strings.TrimSuffix(pattern, "/")
			if !Allowed([]string{pattern}, "https://"+host) || !Allowed([]string{pattern}, "http://"+host+":81") {
				t.Fatalf("bare host %q does not match itself", pattern)
			}
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
