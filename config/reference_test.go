package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The configuration reference against the code, both of its forms in docs/configuration.md:
// the annotated file (its first yaml block) and the table under "Configuration reference".
// Every key Config accepts is in each, every key in them is accepted, and the value shown is
// the default ApplyDefaults gives. A commented-out key of the block (`# io_uring:`) and a
// table default written as a word (required, absent) are documented with no value. The keys
// whose value the block shows as an example, not a default, are listed in exampleKeys.

// exampleKeys have no default (an app's identity, a webhook's target) or a default the block
// replaces with an example worth reading.
var exampleKeys = []string{
	"apps[].app_id", "apps[].key", "apps[].secret",
	"apps[].webhooks[].url", "apps[].webhooks[].event_types", "apps[].webhooks[].headers",
}

// acceptedKeys lists every key path of t by its mapstructure tags: a slice of structs is
// "name[]" and its element's keys follow; maps and other values are leaves.
func acceptedKeys(t reflect.Type, prefix string, out map[string]reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			acceptedKeys(ft, key+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			acceptedKeys(ft.Elem(), key+"[].", out)
		default:
			out[key] = f.Type
		}
	}
}

var commentedKey = regexp.MustCompile(`^(\s*)# ([a-z_]+):(\s.*)?$`)

// documentedKeys reads the first yaml block of the page: key path → the yaml node of its
// value (nil for a commented-out key).
func documentedKeys(t *testing.T, page string) map[string]*yaml.Node {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```yaml\n")
	if !ok {
		t.Fatalf("%s: no yaml block", page)
	}
	block, _, _ := strings.Cut(rest, "\n```")
	commented := map[string]bool{}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if m := commentedKey.FindStringSubmatch(l); m != nil {
			l = m[1] + m[2] + ": ~commented~"
		}
		lines = append(lines, l)
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(strings.Join(lines, "\n")), &root); err != nil {
		t.Fatalf("%s: yaml block: %v", page, err)
	}
	out := map[string]*yaml.Node{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			key := prefix + k
			switch {
			case v.Kind == yaml.ScalarNode && v.Value == "~commented~":
				out[key] = nil
				commented[key] = true
			case v.Kind == yaml.MappingNode && k != "headers":
				walk(v, key+".")
			case v.Kind == yaml.SequenceNode && len(v.Content) > 0 && v.Content[0].Kind == yaml.MappingNode:
				walk(v.Content[0], key+"[].")
			default:
				out[key] = v
			}
		}
	}
	walk(root.Content[0], "")
	return out
}

// defaultValue is the value ApplyDefaults gives key, by walking the mapstructure tags.
func defaultValue(c *Config, key string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for _, part := range strings.Split(key, ".") {
		name, isSlice := strings.CutSuffix(part, "[]")
		for v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		found := false
		for i := range v.NumField() {
			tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("mapstructure"), ",")
			if tag == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}
		}
		if isSlice {
			v = v.Index(0)
		}
	}
	return v
}

// render writes a default as the block would: scalars by fmt, lists as [a, b].
func render(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "<absent>"
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Slice {
		var parts []string
		for i := range v.Len() {
			parts = append(parts, fmt.Sprint(v.Index(i).Interface()))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(v.Interface())
}

func documented(n *yaml.Node) string {
	if n == nil {
		return "<absent>"
	}
	if n.Kind == yaml.SequenceNode {
		var parts []string
		for _, c := range n.Content {
			parts = append(parts, c.Value)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return n.Value
}

var (
	tableRow = regexp.MustCompile("(?m)^\\| (`[^|]+) \\| ([^|]+) \\|")
	tableKey = regexp.MustCompile("`([^`]+)`")
)

// tableKeys reads the reference table: key path → the default as written, backticks and
// quotes removed ("" for `""`, [*] for `["*"]`), or "<absent>" for a word (required, all,
// none, absent). A row may name two keys, the second relative to the first's parent
// (`apps[].toolmark.mcp.jwks_url` / `jwks_file`).
func tableKeys(t *testing.T, page string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), "\n## Configuration reference\n")
	if !ok {
		t.Fatalf("%s: no Configuration reference section", page)
	}
	table, _, _ = strings.Cut(table, "\n## ")
	out := map[string]string{}
	for _, row := range tableRow.FindAllStringSubmatch(table, -1) {
		def := strings.TrimSpace(row[2])
		if v, ok := strings.CutPrefix(def, "`"); ok {
			def = strings.NewReplacer(`"`, "", "`", "").Replace(v)
		} else {
			def = "<absent>"
		}
		first := ""
		for _, k := range tableKey.FindAllStringSubmatch(row[1], -1) {
			key := k[1]
			if first != "" && !strings.Contains(key, ".") {
				key = first[:strings.LastIndex(first, ".")+1] + key
			}
			if first == "" {
				first = key
			}
			out[key] = def
		}
	}
	return out
}

func TestConfigurationReference(t *testing.T) {
	accepted := map[string]reflect.Type{}
	acceptedKeys(reflect.TypeOf(Config{}), "", accepted)
	docs := documentedKeys(t, "../docs/configuration.md")
	table := tableKeys(t, "../docs/configuration.md")
	var tmissing, tunknown []string
	for k := range accepted {
		if _, ok := table[k]; !ok {
			tmissing = append(tmissing, k)
		}
	}
	for k := range table {
		if _, ok := accepted[k]; !ok {
			tunknown = append(tunknown, k)
		}
	}
	sort.Strings(tmissing)
	sort.Strings(tunknown)
	if len(tmissing) > 0 {
		t.Errorf("keys the config accepts that the reference table does not document: %s", strings.Join(tmissing, ", "))
	}
	if len(tunknown) > 0 {
		t.Errorf("keys the reference table documents that the config does not accept: %s", strings.Join(tunknown, ", "))
	}

	var missing, unknown []string
	for k := range accepted {
		if _, ok := docs[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range docs {
		if _, ok := accepted[k]; !ok {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 {
		t.Errorf("keys the config accepts that docs/configuration.md does not document: %s", strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		t.Errorf("keys docs/configuration.md documents that the config does not accept: %s", strings.Join(unknown, ", "))
	}

	c := Config{Apps: []App{{ID: "a", Key: "k", Secret: "s", Webhooks: []Webhook{{}}}}}
	c.ApplyDefaults()
	for k, n := range docs {
		if _, ok := accepted[k]; !ok || slices.Contains(exampleKeys, k) {
			continue
		}
		want := render(defaultValue(&c, k))
		if got := documented(n); got != want {
			t.Errorf("docs/configuration.md shows %s: %s; its default is %s", k, got, want)
		}
	}
	for k, got := range table {
		if _, ok := accepted[k]; !ok || slices.Contains(exampleKeys, k) || slices.Contains(derivedDefaults, k) {
			continue
		}
		if want := render(defaultValue(&c, k)); got != want {
			t.Errorf("the reference table gives %s the default %s; the code's is %s", k, got, want)
		}
	}
}

// derivedDefaults are defaults the table states as what they are derived from.
var derivedDefaults = []string{"apps[].toolmark.mcp.authorization_servers"}
