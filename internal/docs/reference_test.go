package docs

import (
	"bufio"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/config"
)

// tables returns the rows (cells, `\|` unescaped) of text's Markdown
// tables whose header's first cell is header, headers and rules left out.
func tables(text, header string) [][]string {
	var rows [][]string
	sc := bufio.NewScanner(strings.NewReader(stripFences(text)))
	sc.Buffer(nil, 1<<20)
	inTable, wanted, rule := false, false, false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") || !strings.HasSuffix(line, "|") {
			inTable = false
			continue
		}
		var cells []string
		for c := range strings.SplitSeq(strings.ReplaceAll(line[1:len(line)-1], `\|`, "\x00"), "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
		}
		switch {
		case !inTable:
			inTable, wanted, rule = true, cells[0] == header, true
		case rule:
			rule = false
		case wanted:
			rows = append(rows, cells)
		}
	}
	return rows
}

// tableRows returns the rows of the tables of text whose header's first
// cell is header and whose first cell is one code span, by that span: the
// cells after it; and the spans in order.
func tableRows(text, header string) (map[string][]string, []string) {
	rows := map[string][]string{}
	var order []string
	for _, cells := range tables(text, header) {
		m := regexp.MustCompile("^`([^`]+)`$").FindStringSubmatch(cells[0])
		if m == nil {
			continue
		}
		if _, dup := rows[m[1]]; !dup {
			order = append(order, m[1])
		}
		rows[m[1]] = cells[1:]
	}
	return rows, order
}

// stripFences removes fenced blocks.
func stripFences(text string) string {
	var b strings.Builder
	in := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// configKeys returns every key of the struct type t under prefix, by its
// mapstructure tag, with its field's type: sections are walked, everything
// else (scalars, lists, maps, pointers to route sections) is a key.
func configKeys(t reflect.Type, prefix string) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[config.Session]() {
			for k, v := range configKeys(f.Type, key) {
				out[k] = v
			}
			continue
		}
		out[key] = f.Type
	}
	return out
}

// derivedDefaults are the keys whose zero value stands for a default that
// depends on other keys or lives elsewhere, and the words their default
// cell must start with; every other documented default must be the value
// of config.Default, as YAML, in its cell's first code span.
var derivedDefaults = map[string]string{
	"upstream.url":                 "— (required)",
	"tls.ca":                       "Let's Encrypt",
	"tls.storage_dir":              "see [TLS]",
	"tls.http_listen":              "`:80` with `acme`",
	"idempotency.identity_headers": "unset",
	"idempotency.identity.headers": "`[\"Authorization\"]` when no source is set",
	"errors.content_type":          "`application/problem+json`",
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// TestConfigReference: docs/config.md's tables document every key of
// config.Default (found by walking its mapstructure tags) and of a route,
// and no key that does not exist; each default is config.Default's value.
// The documented defaults, written into one file, must decode and validate
// (config.Check) to config.Default exactly.
func TestConfigReference(t *testing.T) {
	t.Parallel()
	rows, _ := tableRows(read(t, "docs/config.md"), "key")
	keys := configKeys(reflect.TypeFor[config.Config](), "")
	delete(keys, "routes")
	routeKeys := configKeys(reflect.TypeFor[config.Route](), "routes[]")

	for k := range rows {
		_, isKey := keys[k]
		_, isRouteKey := routeKeys[k]
		if !isKey && !isRouteKey && k != "routes" && (strings.Contains(k, ".") || strings.Contains(k, "_") || strings.HasPrefix(k, "routes[]")) {
			t.Errorf("docs/config.md documents %s, which is no config key", k)
		}
	}
	for k, typ := range routeKeys {
		row, ok := rows[k]
		if !ok {
			t.Errorf("docs/config.md has no row for the route key %s", k)
			continue
		}
		// A route section's own keys are named in its row.
		if typ.Kind() == reflect.Pointer && typ.Elem().Kind() == reflect.Struct {
			for sub := range configKeys(typ.Elem(), "") {
				if !strings.Contains(row[1], sub) {
					t.Errorf("docs/config.md's row for %s does not name its key %s", k, sub)
				}
			}
		}
	}

	def := config.Default()
	doc := map[string]any{}
	set := func(key string, v any) {
		m := doc
		parts := strings.Split(key, ".")
		for _, p := range parts[:len(parts)-1] {
			next, ok := m[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				m[p] = next
			}
			m = next
		}
		m[parts[len(parts)-1]] = v
	}
	for k, typ := range keys {
		row, ok := rows[k]
		if !ok {
			t.Errorf("docs/config.md has no row for %s", k)
			continue
		}
		if len(row) != 2 {
			t.Errorf("docs/config.md's row for %s has %d cells; want key, default, meaning", k, len(row)+1)
			continue
		}
		cell := row[0]
		if want, ok := derivedDefaults[k]; ok {
			if !strings.HasPrefix(cell, want) {
				t.Errorf("docs/config.md: the default of %s is %q; want it to start with %q", k, cell, want)
			}
			if v := field(def, k); !v.IsZero() {
				t.Errorf("%s has a derived default in docs/config.md, but config.Default sets %v", k, v)
			}
			continue
		}
		m := codeSpan.FindStringSubmatch(cell)
		if m == nil || !strings.HasPrefix(cell, "`") {
			t.Errorf("docs/config.md: the default of %s is %q; want it to start with the value in backquotes", k, cell)
			continue
		}
		if typ.Kind() == reflect.String && typ != reflect.TypeFor[config.Session]() {
			s := m[1]
			if s == `""` {
				s = ""
			}
			set(k, s)
			continue
		}
		var v any
		if err := yaml.Unmarshal([]byte(m[1]), &v); err != nil {
			t.Errorf("docs/config.md: the default of %s, %s, is not YAML: %v", k, m[1], err)
			continue
		}
		// An empty list or map is compared here, not written: an
		// identity's "cookies: []" would configure the identity.
		if e := reflect.ValueOf(v); (e.Kind() == reflect.Slice || e.Kind() == reflect.Map) && e.Len() == 0 {
			if w := field(def, k); w.Len() != 0 {
				t.Errorf("docs/config.md gives %s the default %s; config.Default has %v", k, m[1], w)
			}
			continue
		}
		set(k, v)
	}
	set("upstream.url", "http://127.0.0.1:3000")
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Check(data)
	if err != nil {
		t.Fatalf("the documented defaults are not a valid config:\n%v\n%s", err, data)
	}
	def.Upstream.URL = "http://127.0.0.1:3000"
	for k := range keys {
		if _, derived := derivedDefaults[k]; derived {
			continue
		}
		g, w := field(got, k), field(def, k)
		if !sameValue(g, w) {
			t.Errorf("docs/config.md gives %s the default %v; config.Default has %v", k, g, w)
		}
	}
	if t.Failed() {
		t.Logf("the documented defaults as YAML:\n%s", data)
	}
}

// field returns c's field at key (dotted mapstructure names).
func field(c *config.Config, key string) reflect.Value {
	v := reflect.ValueOf(c).Elem()
	for part := range strings.SplitSeq(key, ".") {
		t := v.Type()
		for i := range t.NumField() {
			if name, _, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ","); name == part {
				v = v.Field(i)
				break
			}
		}
	}
	return v
}

// sameValue compares two values of one type, an empty list or map equal to
// a nil one.
func sameValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Slice, reflect.Map:
		if a.Len() == 0 && b.Len() == 0 {
			return true
		}
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// TestConfigReferenceDetects: the reference test's helpers find a missing
// row and a wrong default (the test above is not vacuous).
func TestConfigReferenceDetects(t *testing.T) {
	t.Parallel()
	rows, order := tableRows("| key | default | meaning |\n|---|---|---|\n| `listen` | `:8081` | x \\| y |\n| `a.b` | `1` | z |\n\n| outcome | x |\n|---|---|\n| `c` | d |\n", "key")
	if !slices.Equal(order, []string{"listen", "a.b"}) || rows["listen"][1] != "x | y" {
		t.Fatalf("tableRows = %v %v", rows, order)
	}
	keys := configKeys(reflect.TypeFor[config.Config](), "")
	if _, ok := keys["idempotency.identity.jwt.leeway"]; !ok {
		t.Errorf("configKeys lacks idempotency.identity.jwt.leeway: %v", keys)
	}
	c, err := config.Check([]byte("upstream: {url: \"http://x\"}\nlisten: \":8081\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if sameValue(field(c, "listen"), field(config.Default(), "listen")) {
		t.Error("a documented :8081 compares equal to the default :8080")
	}
}

// metricRow expands a metrics table's first cell: `a_x_total` /
// `_y_total` names a_x_total and a_y_total (the second replaces the
// first's last words from the same "_").
func metricRow(cell string) []string {
	var names []string
	for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
		n := m[1]
		if strings.HasPrefix(n, "_") && len(names) > 0 {
			first := names[0]
			// The longest prefix of the first name that, with n, makes a
			// name of as many words.
			words := strings.Count(n, "_")
			parts := strings.Split(first, "_")
			n = strings.Join(parts[:len(parts)-words], "_") + n
		}
		names = append(names, n)
	}
	return names
}

// TestMetricsTable: docs/operations.md's metrics table lists exactly the
// metrics of deploy/monitoring/metrics.txt, each with its type and labels.
func TestMetricsTable(t *testing.T) {
	t.Parallel()
	type metric struct{ typ, labels string }
	listed := map[string]metric{}
	for line := range strings.SplitSeq(read(t, "deploy/monitoring/metrics.txt"), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3 {
			t.Fatalf("metrics.txt: %q is not name, type, labels", line)
		}
		labels := f[2]
		if labels == "-" {
			labels = ""
		}
		listed[f[0]] = metric{f[1], labels}
	}
	documented := map[string]bool{}
	for _, row := range tables(read(t, "docs/operations.md"), "metric") {
		if len(row) != 4 {
			t.Errorf("docs/operations.md: metrics row %q has %d cells; want metric, type, labels, what", row, len(row))
			continue
		}
		var labels []string
		for _, m := range codeSpan.FindAllStringSubmatch(row[2], -1) {
			labels = append(labels, m[1])
		}
		for _, n := range metricRow(row[0]) {
			documented[n] = true
			l, ok := listed[n]
			if !ok {
				t.Errorf("docs/operations.md documents %s, which metrics.txt does not list", n)
				continue
			}
			if row[1] != l.typ || strings.Join(labels, ",") != l.labels {
				t.Errorf("docs/operations.md: %s is a %s with labels %q; metrics.txt says a %s with %q", n, row[1], strings.Join(labels, ","), l.typ, l.labels)
			}
		}
	}
	for n := range listed {
		if !documented[n] {
			t.Errorf("docs/operations.md's metrics table lacks %s (deploy/monitoring/metrics.txt lists it)", n)
		}
	}
	if len(documented) < 30 {
		t.Fatalf("found %d metrics in docs/operations.md; the table is no longer found", len(documented))
	}
}

func TestMetricRow(t *testing.T) {
	t.Parallel()
	for cell, want := range map[string][]string{
		"`idemgate_build_info`":                                {"idemgate_build_info"},
		"`idemgate_replay_cache_hits_total` / `_misses_total`": {"idemgate_replay_cache_hits_total", "idemgate_replay_cache_misses_total"},
		"`idemgate_replay_cache_entries` / `_bytes`":           {"idemgate_replay_cache_entries", "idemgate_replay_cache_bytes"},
	} {
		if got := metricRow(cell); !slices.Equal(got, want) {
			t.Errorf("metricRow(%s) = %v; want %v", cell, got, want)
		}
	}
}
