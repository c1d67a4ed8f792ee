package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The chart's README.md is generated from values.yaml's comments, in
// helm-docs' convention: a comment block starting with "# --" right above a
// key documents it (the following "#" lines continue the text), and
// "# @default -- text" replaces the default shown. Regenerate it with
//
//	cd deploy/test && go test -run TestChartReadme -update
var update = flag.Bool("update", false, "rewrite generated files (charts/idemgate/README.md) instead of comparing")

var chartReadme = filepath.Join(chartDir, "README.md")

// valueDoc is one documented key of values.yaml.
type valueDoc struct {
	Key, Type, Default, Description string
}

var keyLineRE = regexp.MustCompile(`^( *)([A-Za-z0-9_.-]+|"[^"]+"):(\s|$)`)

// parseValueDocs reads values.yaml's "# --" comments. It follows the block
// mappings by indentation and skips what is inside lists (list items are
// values, not keys to document).
func parseValueDocs(src []byte) ([]valueDoc, error) {
	var vals map[string]any
	if err := yaml.Unmarshal(src, &vals); err != nil {
		return nil, err
	}
	type frame struct {
		indent int
		key    string
	}
	var (
		stack    []frame
		pending  []string // the comment block right above the current line
		docs     []valueDoc
		listFrom = -1 // indentation of the list being skipped, or -1
	)
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case trimmed == "":
			pending = nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			pending = append(pending, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		// Inside a list: deeper lines, and items at the list's own
		// indentation ("- "), until a key at that indentation or less.
		if listFrom >= 0 && (indent > listFrom || (indent == listFrom && strings.HasPrefix(trimmed, "-"))) {
			pending = nil
			continue
		}
		listFrom = -1
		if strings.HasPrefix(trimmed, "- ") || trimmed == "-" {
			listFrom = indent
			pending = nil
			continue
		}
		m := keyLineRE.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q is neither a key nor a comment", n, line)
		}
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		key := strings.Trim(m[2], `"`)
		path := make([]string, 0, len(stack)+1)
		for _, f := range stack {
			path = append(path, f.key)
		}
		path = append(path, key)
		stack = append(stack, frame{indent, key})

		if desc, def, ok := describe(pending); ok {
			v, found := lookup(vals, path)
			if !found {
				return nil, fmt.Errorf("line %d: %s not found in the parsed values", n, strings.Join(path, "."))
			}
			if def == "" {
				def = "`" + compactJSON(v) + "`"
			}
			docs = append(docs, valueDoc{Key: strings.Join(path, "."), Type: typeName(v), Default: def, Description: desc})
		}
		pending = nil
		// A key whose value is a block list: skip the items.
		if strings.TrimSpace(line[len(m[0])-len(m[3]):]) == "" {
			if v, _ := lookup(vals, path); v != nil {
				if _, isList := v.([]any); isList {
					listFrom = indent
				}
			}
		}
	}
	return docs, sc.Err()
}

// describe returns the description of a comment block, if it has a "# --"
// line, and its "@default --" override.
func describe(comment []string) (desc, def string, ok bool) {
	var parts []string
	for _, c := range comment {
		switch {
		case strings.HasPrefix(c, "@default --"):
			def = strings.TrimSpace(strings.TrimPrefix(c, "@default --"))
		case strings.HasPrefix(c, "--"):
			ok = true
			parts = []string{strings.TrimSpace(strings.TrimPrefix(c, "--"))}
		case ok:
			parts = append(parts, c)
		}
	}
	return strings.Join(parts, " "), def, ok
}

func lookup(m map[string]any, path []string) (any, bool) {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func typeName(v any) string {
	switch n := v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		if n == float64(int64(n)) {
			return "int"
		}
		return "float"
	case int, int64:
		return "int"
	case []any:
		return "list"
	case map[string]any:
		return "object"
	case nil:
		return "string"
	}
	return fmt.Sprintf("%T", v)
}

func compactJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// undocumented returns the leaves of values (scalars, empty maps, lists)
// that no description covers, itself or an ancestor's.
func undocumented(vals map[string]any, docs []valueDoc) []string {
	documented := map[string]bool{}
	for _, d := range docs {
		documented[d.Key] = true
	}
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if documented[prefix] {
			return
		}
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, c := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, c)
			}
			return
		}
		out = append(out, prefix)
	}
	walk("", vals)
	sort.Strings(out)
	return out
}

// chartReadmeText generates charts/idemgate/README.md.
func chartReadmeText(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, err := parseValueDocs(src)
	if err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	meta := chartMeta(t)
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", meta.Name)
	b.WriteString("<!-- Generated from values.yaml by deploy/test (go test -run TestChartReadme -update). Do not edit. -->\n\n")
	fmt.Fprintf(&b, "![Version: %s](https://img.shields.io/badge/Version-%s-informational?style=flat-square) ", meta.Version, strings.ReplaceAll(meta.Version, "-", "--"))
	fmt.Fprintf(&b, "![AppVersion: %s](https://img.shields.io/badge/AppVersion-%s-informational?style=flat-square)\n\n", meta.AppVersion, strings.ReplaceAll(meta.AppVersion, "-", "--"))
	fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(meta.Description))
	fmt.Fprintf(&b, "**Homepage:** <%s>\n\n", meta.Home)
	b.WriteString(`## Installing

` + "```sh" + `
helm install shop-api charts/idemgate -n shop -f my-values.yaml
helm test shop-api -n shop        # runs idemgate validate on the installed config
` + "```" + `

The project's docs/operations.md (Deploying, Kubernetes with Helm) explains the modes (` + "`sidecar`, `standalone`, `include`" + `)
and the named templates for your own charts; docs/guarantees.md the memory and Redis stores and upgrades.
The default image, ` + "`ghcr.io/idemgate/idemgate:<appVersion>`" + `, is not published: build it with the repository's
` + "`Dockerfile`" + `, push it to your registry and set ` + "`image.repository`" + ` and ` + "`image.tag`" + `.

## Requirements

`)
	fmt.Fprintf(&b, "Kubernetes: `%s`\n\n", meta.KubeVersion)
	b.WriteString(`## Monitoring

- ` + "`serviceMonitor.enabled`" + ` or ` + "`podMonitor.enabled`" + `: Prometheus Operator scraping of ` + "`/metrics`" + ` on the admin port (one of them;
  rendered only where the cluster serves ` + "`monitoring.coreos.com/v1`" + ` unless their ` + "`skipCapabilityCheck`" + `).
- ` + "`prometheusRule.enabled`" + `: the alerting rules of ` + "`deploy/monitoring/idemgate-rules.yaml`" + `, each with a runbook in the
  project's docs/operations.md (Runbooks); rendered only where the cluster serves ` + "`monitoring.coreos.com/v1`" + ` unless
  ` + "`prometheusRule.skipCapabilityCheck`" + `.
- ` + "`grafanaDashboard.enabled`" + `: the Grafana dashboard as a ConfigMap labelled ` + "`grafana_dashboard: \"1\"`" + `.

## Values

| Key | Type | Default | Description |
|-----|------|---------|-------------|
`)
	for _, d := range docs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", d.Key, d.Type, strings.ReplaceAll(d.Default, "|", `\|`), strings.ReplaceAll(d.Description, "|", `\|`))
	}
	return b.String()
}

// TestChartReadme: charts/idemgate/README.md is what values.yaml's comments
// generate (run with -update to rewrite it), and every value is documented.
func TestChartReadme(t *testing.T) {
	t.Parallel()
	want := chartReadmeText(t)
	if *update {
		if err := os.WriteFile(chartReadme, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(chartReadme)
	if err != nil {
		t.Fatalf("%v (generate it: cd deploy/test && go test -run TestChartReadme -update)", err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("charts/idemgate/README.md is out of date with values.yaml (line %d):\n have %q\n want %q\nregenerate: cd deploy/test && go test -run TestChartReadme -update", i+1, g, w)
			}
		}
	}

	src, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := yaml.Unmarshal(src, &vals); err != nil {
		t.Fatal(err)
	}
	docs, err := parseValueDocs(src)
	if err != nil {
		t.Fatal(err)
	}
	if u := undocumented(vals, docs); len(u) > 0 {
		t.Errorf("values without a \"# --\" description (on the key or a parent): %v", u)
	}
}

func TestParseValueDocs(t *testing.T) {
	t.Parallel()
	src := `# header comment, not a doc

# -- The mode.
# Second line.
mode: a
image:
  # -- Repo.
  repository: r
  # plain comment
  tag: ""
# -- Big map.
# @default -- see values.yaml
config:
  nested: {a: 1}
list:
  - name: x
    # -- not a key of the chart: inside a list item
    inner: 1
  - name: y
sameIndent:
- a
- b: 1
  c: 2
# -- Same indent list done.
done: true
# -- After the list.
after: 1.5
# -- Hosts.
hosts:
  - host: ""
    paths: [/]
# -- Empty.
empty: {}
`
	docs, err := parseValueDocs([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []valueDoc{
		{"mode", "string", "`\"a\"`", "The mode. Second line."},
		{"image.repository", "string", "`\"r\"`", "Repo."},
		{"config", "object", "see values.yaml", "Big map."},
		{"done", "bool", "`true`", "Same indent list done."},
		{"after", "float", "`1.5`", "After the list."},
		{"hosts", "list", "`[{\"host\":\"\",\"paths\":[\"/\"]}]`", "Hosts."},
		{"empty", "object", "`{}`", "Empty."},
	}
	if fmt.Sprint(docs) != fmt.Sprint(want) {
		t.Errorf("docs:\n got %v\nwant %v", docs, want)
	}
	var vals map[string]any
	if err := yaml.Unmarshal([]byte(src), &vals); err != nil {
		t.Fatal(err)
	}
	if got := undocumented(vals, docs); fmt.Sprint(got) != "[image.tag list sameIndent]" {
		t.Errorf("undocumented = %v; want [image.tag list sameIndent]", got)
	}
	if _, err := parseValueDocs([]byte("a: 1\n  ??? what\n")); err == nil {
		t.Errorf("a line that is no key was accepted")
	}
}
