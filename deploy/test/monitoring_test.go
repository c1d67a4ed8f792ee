package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"sigs.k8s.io/yaml"
)

// The monitoring files: the list of every metric idemgate exports, the
// alerting rules and the Grafana dashboard. The chart ships copies of the
// last two under files/ (a chart cannot read outside its directory).
var (
	monitoringDir = filepath.Join(repoRoot, "deploy", "monitoring")
	metricsList   = filepath.Join(monitoringDir, "metrics.txt")
	rulesFile     = filepath.Join(monitoringDir, "idemgate-rules.yaml")
	dashboardFile = filepath.Join(monitoringDir, "idemgate-dashboard.json")
)

// metricDef is one line of metrics.txt.
type metricDef struct {
	name, typ string
	labels    []string
}

// targetLabels are the labels a scrape adds to every series (Prometheus'
// job and instance, and the Prometheus Operator's Kubernetes ones).
var targetLabels = []string{"job", "instance", "namespace", "pod", "container", "service", "endpoint"}

// readMetricList parses metrics.txt: name, type, labels ("-" for none).
func readMetricList(t *testing.T) map[string]metricDef {
	t.Helper()
	b, err := os.ReadFile(metricsList)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := parseMetricList(b)
	if err != nil {
		t.Fatalf("%s: %v", metricsList, err)
	}
	return defs
}

var metricNameRE = regexp.MustCompile(`^idemgate_[a-z][a-z0-9_]*[a-z0-9]$`)
var labelNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

func parseMetricList(b []byte) (map[string]metricDef, error) {
	defs := map[string]metricDef{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("line %d: %q: want name, type and labels", n, line)
		}
		d := metricDef{name: f[0], typ: f[1]}
		if !metricNameRE.MatchString(d.name) {
			return nil, fmt.Errorf("line %d: %q is not an idemgate_ metric name", n, d.name)
		}
		if _, dup := defs[d.name]; dup {
			return nil, fmt.Errorf("line %d: %s listed twice", n, d.name)
		}
		switch d.typ {
		case "counter":
			if !strings.HasSuffix(d.name, "_total") {
				return nil, fmt.Errorf("line %d: counter %s does not end in _total", n, d.name)
			}
		case "gauge", "histogram":
			if strings.HasSuffix(d.name, "_total") {
				return nil, fmt.Errorf("line %d: %s %s ends in _total, which is for counters", n, d.typ, d.name)
			}
		default:
			return nil, fmt.Errorf("line %d: type %q; want counter, gauge or histogram", n, d.typ)
		}
		if f[2] != "-" {
			d.labels = strings.Split(f[2], ",")
			for _, l := range d.labels {
				if !labelNameRE.MatchString(l) || l == "le" || slices.Contains(targetLabels, l) {
					return nil, fmt.Errorf("line %d: label %q of %s is not a valid own label", n, l, d.name)
				}
			}
		}
		defs[d.name] = d
	}
	return defs, sc.Err()
}

// selector is a metric selector found in a PromQL expression: the metric's
// name and the label names its matchers use.
type selector struct {
	name   string
	labels []string
}

// promqlKeywords are the identifiers of PromQL that are not metric names
// when no parenthesis follows them.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "inf": true, "nan": true, "atan2": true,
	// aggregations, which may be followed by by or without before their "("
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true,
	"quantile": true, "limitk": true, "limit_ratio": true,
}

// labelListKeywords are followed by a parenthesized list of label names,
// which are not selectors.
var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// promqlSelectors finds the metric selectors of a PromQL expression (with
// Grafana's $variables) by scanning its tokens: strings, ranges and
// subqueries ([...]), numbers and durations, functions and aggregations
// (an identifier before "("), keywords and the label lists after by,
// without, on, ignoring and group_*. What is left are metric names, each
// with its {matchers}. A selector without a name ({__name__=...}) is an
// error: every query must say which metric it reads.
func promqlSelectors(expr string) ([]selector, error) {
	var out []selector
	s := []rune(expr)
	i := 0
	skipSpace := func() {
		for i < len(s) && unicode.IsSpace(s[i]) {
			i++
		}
	}
	skipString := func() error {
		q := s[i]
		for i++; i < len(s); i++ {
			if s[i] == '\\' && q != '`' {
				i++
				continue
			}
			if s[i] == q {
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	ident := func() string {
		start := i
		for i < len(s) && (s[i] == '_' || s[i] == ':' || unicode.IsLetter(s[i]) || unicode.IsDigit(s[i])) {
			i++
		}
		return string(s[start:i])
	}
	// matchers parses {name op "value", ...} and returns the label names.
	matchers := func() ([]string, error) {
		var names []string
		i++ // {
		for {
			skipSpace()
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated {} in %q", expr)
			}
			switch {
			case s[i] == '}':
				i++
				return names, nil
			case s[i] == ',':
				i++
			case s[i] == '_' || unicode.IsLetter(s[i]):
				names = append(names, ident())
				skipSpace()
				for i < len(s) && strings.ContainsRune("=!~", s[i]) {
					i++
				}
				skipSpace()
				if i >= len(s) || !strings.ContainsRune("\"'`", s[i]) {
					return nil, fmt.Errorf("matcher %s without a quoted value in %q", names[len(names)-1], expr)
				}
				if err := skipString(); err != nil {
					return nil, err
				}
			default:
				return nil, fmt.Errorf("unexpected %q in matchers of %q", s[i], expr)
			}
		}
	}
	for i < len(s) {
		c := s[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, err
			}
		case c == '[':
			end := strings.IndexRune(string(s[i:]), ']')
			if end < 0 {
				return nil, fmt.Errorf("unterminated [] in %q", expr)
			}
			i += len([]rune(string(s[i:])[:end])) + 1
		case c == '{':
			return nil, fmt.Errorf("a selector without a metric name in %q", expr)
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				for i < len(s) && s[i] != '}' {
					i++
				}
				i++
			} else {
				ident()
			}
		case unicode.IsDigit(c) || (c == '.' && i+1 < len(s) && unicode.IsDigit(s[i+1])):
			for i < len(s) && (s[i] == '.' || unicode.IsLetter(s[i]) || unicode.IsDigit(s[i]) ||
				((s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E'))) {
				i++
			}
		case c == '_' || c == ':' || unicode.IsLetter(c):
			name := ident()
			skipSpace()
			next := rune(0)
			if i < len(s) {
				next = s[i]
			}
			switch {
			case labelListKeywords[strings.ToLower(name)] && next == '(':
				end := strings.IndexRune(string(s[i:]), ')')
				if end < 0 {
					return nil, fmt.Errorf("unterminated label list after %s in %q", name, expr)
				}
				i += len([]rune(string(s[i:])[:end])) + 1
			case next == '(' || promqlKeywords[strings.ToLower(name)]:
				// a function, an aggregation or a keyword
			default:
				sel := selector{name: name}
				if next == '{' {
					labels, err := matchers()
					if err != nil {
						return nil, err
					}
					sel.labels = labels
				}
				out = append(out, sel)
			}
		default:
			i++
		}
	}
	return out, nil
}

// checkQuery checks that every selector of expr names a metric of defs (a
// histogram through its _bucket, _sum or _count series) or the Go runtime's
// and the process' collectors, and matches only labels that metric has.
func checkQuery(defs map[string]metricDef, expr string) error {
	sels, err := promqlSelectors(expr)
	if err != nil {
		return err
	}
	if len(sels) == 0 {
		return fmt.Errorf("%q reads no metric", expr)
	}
	var errs []string
	for _, sel := range sels {
		if strings.HasPrefix(sel.name, "go_") || strings.HasPrefix(sel.name, "process_") {
			continue
		}
		if sel.name == "up" { // Prometheus' own series of each target
			for _, l := range sel.labels {
				if !slices.Contains(targetLabels, l) {
					errs = append(errs, fmt.Sprintf("up has no label %q (only the target's)", l))
				}
			}
			continue
		}
		d, ok := defs[sel.name]
		extra := []string{}
		if !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, found := strings.CutSuffix(sel.name, suffix); found && defs[base].typ == "histogram" {
					d, ok = defs[base], true
					if suffix == "_bucket" {
						extra = append(extra, "le")
					}
				}
			}
		}
		if !ok {
			errs = append(errs, fmt.Sprintf("%s is not in deploy/monitoring/metrics.txt", sel.name))
			continue
		}
		if d.name == sel.name && d.typ == "histogram" {
			// The bare name is a native histogram, which a Prometheus
			// scrapes only when told to: read the classic series.
			errs = append(errs, fmt.Sprintf("%s is a histogram: read its _bucket, _sum or _count", sel.name))
			continue
		}
		for _, l := range sel.labels {
			if !slices.Contains(d.labels, l) && !slices.Contains(targetLabels, l) && !slices.Contains(extra, l) {
				errs = append(errs, fmt.Sprintf("%s has no label %q (it has %v)", sel.name, l, d.labels))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s\nin %s", strings.Join(errs, "; "), expr)
	}
	return nil
}

func TestPromQLSelectors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []selector
	}{
		{`up`, []selector{{name: "up"}}},
		{`sum by (route, le) (rate(a_bucket{x="1", y=~"$v"}[$__rate_interval]))`, []selector{{"a_bucket", []string{"x", "y"}}}},
		{`sum(rate(a_total[5m])) by (job) / ignoring(code) group_left(route) b offset 5m > 0.01`,
			[]selector{{name: "a_total"}, {name: "b"}}},
		{`histogram_quantile(0.99, sum without (pod) (rate(h_bucket{a!~"x\"}y"}[1m:30s]))) * 1e-3`,
			[]selector{{"h_bucket", []string{"a"}}}},
		{"x - time() < 14 * 86400 or vector(0)", []selector{{name: "x"}}},
		{"a / (b > 0) >= 0.85 unless on(pod) c", []selector{{name: "a"}, {name: "b"}, {name: "c"}}},
		{"label_values(idemgate_build_info{namespace=~\"$namespace\"}, job)", []selector{{"idemgate_build_info", []string{"namespace"}}, {name: "job"}}},
	}
	for _, tt := range tests {
		got, err := promqlSelectors(tt.expr)
		if err != nil {
			t.Errorf("%s: %v", tt.expr, err)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s:\n got %v\nwant %v", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `a{b="c"`, `a{b=c}`, `rate(a[5m)`, `a{b="c}`} {
		if got, err := promqlSelectors(bad); err == nil {
			t.Errorf("%s: got %v; want an error", bad, got)
		}
	}

	defs, err := parseMetricList([]byte("idemgate_x_total counter route\nidemgate_h_seconds histogram op\n"))
	if err != nil {
		t.Fatal(err)
	}
	for expr, want := range map[string]string{
		`rate(idemgate_x_total{route="a", namespace="b"}[5m])`:                 "",
		`histogram_quantile(0.9, rate(idemgate_h_seconds_bucket{le="1"}[5m]))`: "",
		`go_goroutines + process_open_fds`:                                     "",
		`rate(idemgate_y_total[5m])`:                                           "idemgate_y_total is not in",
		`rate(idemgate_x_total{outcome="a"}[5m])`:                              `no label "outcome"`,
		`idemgate_h_seconds_bucket`:                                            "",
		`idemgate_h_seconds`:                                                   "is a histogram",
		`idemgate_x_total_count`:                                               "is not in",
		`idemgate_h_seconds_sum{le="1"}`:                                       `no label "le"`,
		`vector(1)`:                                                            "reads no metric",
	} {
		err := checkQuery(defs, expr)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", expr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v; want one mentioning %q", expr, err, want)
		}
	}
	for _, bad := range []string{
		"idemgate_a counter -",
		"idemgate_a_total gauge -",
		"idemgate_a_total counter",
		"idemgate_a_total counter job",
		"idemgate_a_total counter le",
		"idemgate_a_total summary -",
		"requests_total counter -",
		"idemgate_a_total counter -\nidemgate_a_total counter -",
	} {
		if _, err := parseMetricList([]byte(bad)); err == nil {
			t.Errorf("metric list %q accepted", bad)
		}
	}
}

// TestMetricListCoversCode: every metric the Go code registers (Name: in
// an Opts, a histogramOpts name, a NewDesc, a name given to one of
// internal/metric's constructors) is in metrics.txt; the
// Metrics table of docs/operations.md names only listed metrics, with their listed types.
func TestMetricListCoversCode(t *testing.T) {
	t.Parallel()
	defs := readMetricList(t)
	re := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*|histogramOpts\(\s*|metric\.[A-Za-z]+\((?:\w+,\s*)?)"(idemgate_[a-z0-9_]+)"`)
	found := 0
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".tmp", "deploy", "bench", "testdata", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			found++
			if _, ok := defs[string(m[1])]; !ok {
				rel, _ := filepath.Rel(repoRoot, p)
				t.Errorf("%s registers %s, which deploy/monitoring/metrics.txt does not list", rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d metric registrations in the Go code; the pattern no longer matches how metrics are registered", found)
	}

	// The Metrics table of docs/operations.md names only listed metrics.
	readme, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `(idemgate_[a-z0-9_]+)` \\| ([a-z]+) \\|").FindAllSubmatch(readme, -1)
	if len(rows) < 10 {
		t.Fatalf("found %d rows in the Metrics table of docs/operations.md; the pattern no longer matches it", len(rows))
	}
	for _, r := range rows {
		name, typ := string(r[1]), string(r[2])
		if d, ok := defs[name]; !ok {
			t.Errorf("docs/operations.md's Metrics table has %s, which metrics.txt does not list", name)
		} else if d.typ != typ {
			t.Errorf("docs/operations.md says %s is a %s; metrics.txt says %s", name, typ, d.typ)
		}
	}
}

// ruleFile is Prometheus' rule file format, decoded strictly.
type ruleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []struct {
			Alert       string            `json:"alert,omitempty"`
			Record      string            `json:"record,omitempty"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels,omitempty"`
			Annotations map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

func readRules(t *testing.T, path string) ruleFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return rf
}

// githubAnchors returns the anchors GitHub gives a Markdown file's headings.
func githubAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var slug strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				slug.WriteRune(r)
			case r == ' ':
				slug.WriteRune('-')
			}
		}
		anchors[slug.String()] = true
	}
	return anchors
}

// TestAlertRules: the rule file decodes strictly; every alert has a
// severity, a summary, a description and a runbook_url that points at a
// heading of docs/operations.md; every expression reads only listed metrics; the alerts
// the project promises are all there.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	defs := readMetricList(t)
	rf := readRules(t, rulesFile)
	anchors := githubAnchors(t, filepath.Join(repoRoot, "docs", "operations.md"))
	const runbooks = "https://github.com/idemgate/idemgate/blob/main/docs/operations.md#"
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		if !strings.HasPrefix(g.Name, "idemgate") {
			t.Errorf("group %q: name it idemgate.*", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without alert (recording rules: none yet)", g.Name)
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			if err := checkQuery(defs, r.Expr); err != nil {
				t.Errorf("alert %s: %v", r.Alert, err)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" && s != "info" {
				t.Errorf("alert %s: severity %q; want critical, warning or info", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("alert %s has no %s", r.Alert, a)
				}
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbooks)
			if !ok || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a heading of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
			}
			if anchor != strings.ToLower(r.Alert) {
				t.Errorf("alert %s: runbook_url anchor %q; want its own section #%s", r.Alert, anchor, strings.ToLower(r.Alert))
			}
		}
	}
	for _, want := range []string{
		"IdemgateStoreUnavailable", "IdemgateStoreReset", "IdemgateTakeover",
		"IdemgateLateCompletionsRejected", "IdemgateMemoryStoreNearlyFull",
		"IdemgateUpstreamErrors", "IdemgateSessionBusy", "IdemgateSessionLockFallback",
		"IdemgateLimiterFallback", "IdemgateConfigReloadFailed", "IdemgateRestartRequired",
		"IdemgateCertificateExpiringSoon", "IdemgateTargetDown", "IdemgateAbsent", "IdemgateHighLatency",
	} {
		if !alerts[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
	// Every alert is unit-tested by promtool (make test-monitoring).
	tests, err := os.ReadFile(filepath.Join(monitoringDir, "idemgate-rules.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for a := range alerts {
		if !strings.Contains(string(tests), "alertname: "+a+"\n") {
			t.Errorf("alert %s has no test in idemgate-rules.test.yaml", a)
		}
	}
}

// dashboard is the part of a Grafana dashboard the checks read.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels      []panel `json:"panels"` // a collapsed row's
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
		Overrides []struct {
			Properties []struct {
				ID string `json:"id"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-z_]+)\)$`)

// TestDashboardQueries: every panel's query (and every template
// variable's) reads only metrics of metrics.txt, with their labels; the
// dashboard has the rows the project promises; panels have unique ids and
// use the dashboard's data source variable.
func TestDashboardQueries(t *testing.T) {
	t.Parallel()
	defs := readMetricList(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard uid %q, title %q: both are needed for provisioning", d.UID, d.Title)
	}
	ids := map[int]string{}
	var rows []string
	queries := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				rows = append(rows, p.Title)
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q does not use the ${datasource} variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				if err := checkQuery(defs, tg.Expr); err != nil {
					t.Errorf("panel %q: %v", p.Title, err)
				}
			}
		}
	}
	walk(d.Panels)
	if want := []string{"Traffic and outcomes", "Errors", "Latency", "Safety", "Unknown outcomes", "Operations"}; !slices.Equal(rows, want) {
		t.Errorf("rows %q; want %q", rows, want)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		m := labelValuesRE.FindStringSubmatch(q)
		if m == nil {
			t.Errorf("variable %s: query %q; want label_values(<selector>, <label>)", v.Name, q)
			continue
		}
		if err := checkQuery(defs, m[1]); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
		sels, _ := promqlSelectors(m[1])
		if len(sels) == 1 && !slices.Contains(defs[sels[0].name].labels, m[2]) && !slices.Contains(targetLabels, m[2]) {
			t.Errorf("variable %s: %s has no label %s", v.Name, sels[0].name, m[2])
		}
	}
	// Every listed metric is on the dashboard, unless it only feeds an
	// alert or is an operator's detail.
	onDashboard := string(b)
	for name := range defs {
		if !strings.Contains(onDashboard, name) {
			t.Errorf("metric %s is on no panel", name)
		}
	}
	t.Logf("%d panels, %d queries, %d rows", len(ids)-len(rows), queries, len(rows))
}

// TestChartMonitoringFilesInSync: the chart's copies of the rules and the
// dashboard (a chart reads only its own files) are those of deploy/monitoring.
func TestChartMonitoringFilesInSync(t *testing.T) {
	t.Parallel()
	for _, f := range []string{rulesFile, dashboardFile} {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		copyPath := filepath.Join(chartDir, "files", filepath.Base(f))
		got, err := os.ReadFile(copyPath)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from %s: cp deploy/monitoring/%s charts/idemgate/files/", copyPath, f, filepath.Base(f))
		}
	}
}

// queryUnit is the unit of what a dashboard query computes, from its shape
// and the names of the metrics it reads: "s" (a latency quantile, a mean
// of durations, a time until or since a timestamp), "percentunit" (a ratio
// of two sums), "per-second" (a rate), "cores" (a rate of CPU seconds),
// "bytes" (a gauge of bytes) or "count" (an increase, a gauge of things, a
// count). A shape it does not know is an error: extend it, never guess.
func queryUnit(expr string) (string, error) {
	sels, err := promqlSelectors(expr)
	if err != nil {
		return "", err
	}
	all := func(suffix string) bool {
		for _, sel := range sels {
			if !strings.HasSuffix(sel.name, suffix) {
				return false
			}
		}
		return len(sels) > 0
	}
	switch {
	case strings.Contains(expr, "histogram_quantile("):
		if !all("_seconds_bucket") {
			return "", fmt.Errorf("a quantile of buckets not in seconds: %s", expr)
		}
		return "s", nil
	case strings.Contains(expr, " / "):
		if len(sels) == 2 && strings.HasSuffix(sels[0].name, "_seconds_sum") && strings.HasSuffix(sels[1].name, "_seconds_count") {
			return "s", nil
		}
		return "percentunit", nil
	case strings.Contains(expr, "time()"):
		if !all("_timestamp_seconds") {
			return "", fmt.Errorf("time() beside something that is no timestamp: %s", expr)
		}
		return "s", nil
	case strings.Contains(expr, "increase("):
		return "count", nil
	case strings.Contains(expr, "rate("):
		if all("_seconds_total") {
			return "cores", nil
		}
		return "per-second", nil
	case all("_bytes"):
		return "bytes", nil
	}
	for _, sel := range sels {
		if strings.HasSuffix(sel.name, "_bytes") || strings.HasSuffix(sel.name, "_seconds") || strings.HasSuffix(sel.name, "_total") {
			return "", fmt.Errorf("%s read without a function that gives its unit: %s", sel.name, expr)
		}
	}
	return "count", nil
}

// grafanaUnits are the panel units that show each queryUnit.
var grafanaUnits = map[string][]string{
	"s":           {"s"},
	"percentunit": {"percentunit"},
	"per-second":  {"reqps", "ops", "rps", "wps"},
	"cores":       {"short", "none"},
	"bytes":       {"bytes"},
	"count":       {"short", "none"},
}

// panelUnitError says why a panel's queries do not share one unit shown
// by its unit (nil when they do). Per-series unit overrides are refused:
// one panel, one unit, one axis.
func panelUnitError(p panel) error {
	var errs []string
	for _, o := range p.FieldConfig.Overrides {
		for _, prop := range o.Properties {
			if prop.ID == "unit" {
				errs = append(errs, "overrides the unit of some series")
			}
		}
	}
	units := map[string][]string{}
	for _, tg := range p.Targets {
		u, err := queryUnit(tg.Expr)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		units[u] = append(units[u], tg.Expr)
	}
	if len(units) > 1 {
		errs = append(errs, fmt.Sprintf("mixes units %v", slices.Sorted(maps.Keys(units))))
	}
	for u := range units {
		if !slices.Contains(grafanaUnits[u], p.FieldConfig.Defaults.Unit) {
			errs = append(errs, fmt.Sprintf("shows %s queries in unit %q; want one of %q", u, p.FieldConfig.Defaults.Unit, grafanaUnits[u]))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("panel %q: %s", p.Title, strings.Join(errs, "; "))
	}
	return nil
}

// TestDashboardUnits: each panel's queries share one unit, the panel's.
func TestDashboardUnits(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if err := panelUnitError(p); err != nil {
				t.Error(err)
			}
		}
	}
	walk(d.Panels)
}

// TestPanelUnitErrorCatches: the check refuses the mixes it exists for.
func TestPanelUnitErrorCatches(t *testing.T) {
	t.Parallel()
	mk := func(unit string, exprs ...string) panel {
		var p panel
		p.Title = "p"
		p.FieldConfig.Defaults.Unit = unit
		for _, e := range exprs {
			p.Targets = append(p.Targets, struct {
				Expr string `json:"expr"`
			}{e})
		}
		return p
	}
	const (
		p99   = `histogram_quantile(0.99, sum by (le) (rate(idemgate_session_wait_seconds_bucket[5m])))`
		depth = `sum(idemgate_session_queue_depth)`
		rate  = `sum(rate(idemgate_store_errors_total[5m]))`
		incr  = `sum(increase(idemgate_store_resets_total[5m]))`
		bytes = `sum(idemgate_replay_cache_bytes)`
		cpu   = `sum(rate(process_cpu_seconds_total[5m]))`
	)
	for _, tc := range []struct {
		name string
		p    panel
		want string
	}{
		{"seconds and a count", mk("s", p99, depth), "mixes units"},
		{"a rate and increases", mk("short", rate, incr), "mixes units"},
		{"entries and bytes", mk("short", depth, bytes), "mixes units"},
		{"cores and goroutines", mk("short", cpu, `sum(go_goroutines)`), "mixes units"},
		{"wrong panel unit", mk("short", p99), `shows s queries in unit "short"`},
		{"raw counter", mk("short", `sum(idemgate_store_errors_total)`), "without a function"},
	} {
		if err := panelUnitError(tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error with %q", tc.name, err, tc.want)
		}
	}
	if err := panelUnitError(mk("s", p99, p99)); err != nil {
		t.Errorf("one unit: %v", err)
	}
}
