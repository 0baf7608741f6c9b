package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/reverbgo/reverbgo/config"
)

// mask replaces a secret value in config check's output.
const mask = "********"

// runConfig is "reverbgo config check [--config PATH]": it loads and validates exactly as
// start does (file, environment overrides, defaults, validation) and prints the effective
// configuration with every secret masked, so a deploy can check a file before using it.
func runConfig(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(stderr, "usage: reverbgo config check [--config PATH]")
		return 2
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "config file (default ./config.yaml)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintln(stderr, "reverbgo: config:", err)
		return 1
	}
	// start refuses a TLS pair that does not load, so the check does too.
	if tlsEnabled(cfg) {
		if _, err := newCertReloader(cfg.Server.TLS.Cert, cfg.Server.TLS.Key); err != nil {
			fmt.Fprintln(stderr, "reverbgo: config:", err)
			return 1
		}
	}
	printReverbEnvWarnings(stderr, os.Environ())
	out, err := maskedYAML(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "reverbgo: config:", err)
		return 1
	}
	_, _ = stdout.Write(out)
	return 0
}

// maskedYAML renders cfg as YAML under its config-file key names, in struct order, with
// secrets masked (see isSecretKey and maskURL).
func maskedYAML(cfg *config.Config) ([]byte, error) {
	node := toNode(reflect.ValueOf(cfg).Elem(), "")
	return yaml.Marshal(node)
}

// isSecretKey reports whether a config key holds a credential. It goes by name so that keys
// other packages add later (a console token, a webhook header secret) are masked too.
func isSecretKey(key string) bool {
	k := strings.ToLower(key)
	for _, w := range []string{"secret", "token", "password", "passwd", "credential", "authoriz", "cookie", "apikey", "api-key", "api_key"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// urlPlaceholder stands for a masked URL part while net/url re-assembles the URL, so that
// the mask itself is never percent-encoded; it cannot occur in a parsed URL's own parts.
const urlPlaceholder = "\x00masked\x00"

// maskURL hides the credentials a URL can carry: the password of user info
// (redis://user:pass@host keeps the user name), a user info without a password (often a token,
// https://TOKEN@hooks.example.com, so all of it), every query value (?token=..., the names
// stay) and the fragment. A string that looks like a URL but does not parse is masked whole
// when it has a part that could hold a credential.
func maskURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		if strings.ContainsAny(s, "@?#") {
			return mask // unparsable but may hold a password: never echo it
		}
		return s
	}
	if u.User == nil && u.RawQuery == "" && u.Fragment == "" {
		return s
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "p")
		} else {
			u.User = url.User("u")
		}
	}
	if u.RawQuery != "" {
		parts := strings.Split(u.RawQuery, "&")
		for i, part := range parts {
			k, _, _ := strings.Cut(part, "=")
			parts[i] = k + "=" + urlPlaceholder
		}
		u.RawQuery = strings.Join(parts, "&")
	}
	if u.Fragment != "" {
		u.Fragment, u.RawFragment = "f", ""
	}
	out := u.String()
	// Swap the stand-ins for the mask at their exact positions (scheme://user:p@, scheme://u@, #f).
	if u.User != nil {
		if _, has := u.User.Password(); has {
			out = strings.Replace(out, ":p@", ":"+mask+"@", 1)
		} else {
			out = strings.Replace(out, "://u@", "://"+mask+"@", 1)
		}
	}
	if u.Fragment != "" {
		out = out[:strings.LastIndex(out, "#f")] + "#" + mask
	}
	return strings.ReplaceAll(out, urlPlaceholder, mask)
}

func scalar(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

// toNode converts a config value; key is its field name, used for masking.
func toNode(v reflect.Value, key string) *yaml.Node {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return scalar("!!null", "null")
		}
		return toNode(v.Elem(), key)
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if name == "" || name == "-" {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", name), toNode(v.Field(i), name))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode}
		iter := v.MapRange()
		var keys []string
		vals := map[string]reflect.Value{}
		for iter.Next() {
			k := fmt.Sprint(iter.Key().Interface())
			keys = append(keys, k)
			vals[k] = iter.Value()
		}
		sort.Strings(keys)
		for _, k := range keys {
			// Webhook header values are all masked: a gateway token can sit under any header
			// name (X-Gateway-Key, X-Hook), so going by the name would leak some. Other maps
			// are masked by their own name or their parent's.
			child := toNode(vals[k], k)
			if (key == "headers" || isSecretKey(key)) && child.Kind == yaml.ScalarNode {
				child = scalar("!!str", mask)
			}
			n.Content = append(n.Content, scalar("!!str", k), child)
		}
		return n
	case reflect.Slice, reflect.Array:
		n := &yaml.Node{Kind: yaml.SequenceNode, Style: flowIfScalars(v)}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, toNode(v.Index(i), key))
		}
		return n
	case reflect.String:
		s := v.String()
		if isSecretKey(key) && s != "" {
			return scalar("!!str", mask)
		}
		return scalar("!!str", maskURL(s))
	case reflect.Bool:
		return scalar("!!bool", strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar("!!int", strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar("!!int", strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return scalar("!!float", strconv.FormatFloat(v.Float(), 'g', -1, 64))
	}
	return scalar("!!str", fmt.Sprint(v.Interface()))
}

// flowIfScalars prints short lists of scalars on one line, like the example config.
func flowIfScalars(v reflect.Value) yaml.Style {
	if v.Type().Elem().Kind() == reflect.String {
		return yaml.FlowStyle
	}
	return 0
}
