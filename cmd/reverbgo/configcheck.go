package main

import (
	"flag"
	"fmt"
	"io"
	"net/url"
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

// maskURL hides the password of a URL with user info (redis://user:pass@host).
func maskURL(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return mask // unparsable but may hold a password: never echo it
	}
	if u.User == nil {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
		return strings.Replace(u.String(), ":xxxxx@", ":"+mask+"@", 1)
	}
	return s
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
			// Map entries (e.g. webhook headers) are masked by their own name or their parent's.
			child := toNode(vals[k], k)
			if isSecretKey(key) && child.Kind == yaml.ScalarNode {
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
