package openapi

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// Merge updates the routes of config (the bytes of an idemgate YAML config)
// with res, and returns the new bytes and one note per thing an operator
// should know about (a route kept that the document no longer has, a value
// it changed).
//
// It edits the text, not a re-encoding of it: every line it does not change
// stays byte for byte as it was, comments, blank lines, quoting, alignment
// and key order included. In a block-style route entry, a changed value is
// replaced on its own line (keeping its line comment) and an added key is
// inserted after the entry's last key; a flow-style entry, or one whose
// changed value spans several lines, is re-encoded whole (two-space indent,
// its comments kept). A generated route is matched with an existing
// one by method and path (parameter names aside), else by method and name
// (the operation's path moved). A matched
// route keeps:
//
//   - its name, and its path when only parameter names differ (a session
//     parameter from the document is renamed to match);
//   - every key the importer never sets (timeout, mode, release_statuses,
//     drop_headers, wait_timeout, errors, ...);
//   - every key the document says nothing about: require_key, session,
//     fingerprint_ignore, retention, in_progress, rate_limit and protocol
//     are replaced only when the document sets them (an extension or a
//     required key header parameter);
//   - the comments inside it.
//
// A write route gets idempotent: true. Generated routes matching no
// existing route are appended to routes (renamed when their name is taken;
// left out, with a note, when they would be ambiguous with a route of the
// config); existing routes matching no generated one are kept, with a note. path_case: sensitive is added when
// the document needs it.
func Merge(config []byte, res *Result) ([]byte, []string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, nil, fmt.Errorf("not YAML: %v", oneLine(err))
	}
	var root *yaml.Node
	switch {
	case doc.Kind == 0:
		root = &yaml.Node{Kind: yaml.MappingNode}
	case doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode:
		root = doc.Content[0]
	default:
		return nil, nil, errors.New("the config is not a YAML mapping")
	}
	m := &merger{lines: splitLines(config), root: root}
	rootCol := 0 // the column of the top-level keys
	if len(root.Content) > 0 {
		rootCol = root.Content[0].Column - 1
	}
	var notes []string
	routesKey, routes := lookup(root, "routes")
	var items []*yaml.Node
	if routes != nil && routes.Kind == yaml.SequenceNode {
		items = routes.Content
	} else if routes != nil && !(routes.Kind == yaml.ScalarNode && routes.Tag == "!!null") {
		return nil, nil, errors.New("routes is not a list")
	}
	type existing struct {
		node               *yaml.Node
		name, method, path string
		shape              string
		matched            bool
		changes            []change
	}
	ex := make([]*existing, len(items))
	ex2nodes := func(ex []*existing) []*yaml.Node {
		out := make([]*yaml.Node, len(ex))
		for i, e := range ex {
			out[i] = e.node
		}
		return out
	}
	ex2routes := func(ex []*existing) []Route {
		out := make([]Route, 0, len(ex))
		for _, e := range ex {
			out = append(out, Route{Name: e.name, Method: e.method, Path: e.path})
		}
		return out
	}
	for i, it := range items {
		e := &existing{node: it}
		if it.Kind == yaml.AliasNode {
			it = it.Alias
		}
		if it.Kind != yaml.MappingNode {
			return nil, nil, fmt.Errorf("routes[%d] is not a mapping", i)
		}
		e.node = it
		_, n := lookup(it, "name")
		_, mt := lookup(it, "method")
		_, p := lookup(it, "path")
		e.name, e.method, e.path = scalarValue(n), strings.ToUpper(scalarValue(mt)), scalarValue(p)
		if t, err := pathtmpl.Parse(e.path); err == nil {
			e.shape = shapeOf(t)
		}
		ex[i] = e
	}
	var added []Route
	var n []string
	for _, g := range res.Routes {
		gshape := shapeOf(pathtmpl.MustParse(g.Path))
		var e *existing
		for _, c := range ex {
			if !c.matched && c.method == g.Method && c.shape == gshape {
				e = c
				break
			}
		}
		if e == nil {
			// The same operation under a moved path.
			for _, c := range ex {
				if !c.matched && c.name == g.Name && c.method == g.Method {
					e = c
					break
				}
			}
		}
		if e == nil {
			if note, ok := addable(&g, ex2routes(ex), added); !ok {
				notes = append(notes, note)
				continue
			} else if note != "" {
				notes = append(notes, note)
			}
			added = append(added, g)
			continue
		}
		e.matched = true
		if items[slices.IndexFunc(ex, func(c *existing) bool { return c == e })].Kind == yaml.AliasNode {
			notes = append(notes, fmt.Sprintf("route %q is a YAML alias; not changed", e.name))
			continue
		}
		e.changes, n = updateRoute(e.node, e.path, e.shape == gshape, g)
		notes = append(notes, n...)
	}
	for _, e := range ex {
		if !e.matched {
			notes = append(notes, fmt.Sprintf("route %q (%s %s) has no operation in the document; kept as it is", e.name, e.method, e.path))
		}
	}

	// Text edits, applied bottom up.
	if routes != nil && routes.Kind == yaml.SequenceNode && routes.Style&yaml.FlowStyle == 0 && len(items) > 0 {
		dash := routes.Column - 1
		starts := make([]int, len(items))
		for i, it := range items {
			starts[i] = m.itemStart(it, dash)
		}
		var lastEnd int
		for i := range items {
			end := m.blockEnd(starts[i], dash)
			if i+1 < len(items) {
				end = m.trimTrailing(starts[i+1], dash)
			}
			if i == len(items)-1 {
				lastEnd = end
			}
			if len(ex[i].changes) > 0 && !m.patch(ex[i].node, ex[i].changes, starts[i], end) {
				m.edit(starts[i], end, m.itemText(ex[i].node, dash, starts[i], end))
			}
		}
		if len(added) > 0 {
			var b strings.Builder
			for _, r := range added {
				b.WriteString(indent(string(encode(&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{RouteNode(r)}})), dash))
			}
			m.edit(lastEnd, lastEnd, b.String())
		}
	} else if len(added) > 0 || routes != nil && routes.Kind == yaml.SequenceNode && len(items) > 0 {
		// No routes, null routes or a flow list: write the whole section.
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, e := range ex {
			n := *e.node
			n.Style &^= yaml.FlowStyle
			seq.Content = append(seq.Content, &n)
		}
		for _, r := range added {
			seq.Content = append(seq.Content, RouteNode(r))
		}
		text := string(encode(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("routes"), seq}}))
		if routesKey == nil {
			m.edit(len(m.lines), len(m.lines), ensureNewline(m.lines)+indent(text, rootCol))
		} else {
			start := routesKey.Line - 1
			m.edit(start, m.blockEnd(start, routesKey.Column-1), indent(text, routesKey.Column-1))
		}
	}
	if res.PathCaseSensitive {
		pcKey, pc := lookup(root, "path_case")
		switch {
		case pc == nil:
			at := len(m.lines)
			if routesKey != nil {
				at = routesKey.Line - 1
			}
			m.edit(at, at, indent("path_case: sensitive  # two paths of the API differ only in case\n", rootCol))
			notes = append(notes, "path_case: sensitive added: two paths of the document differ only in case")
		case scalarValue(pc) != "sensitive":
			notes = append(notes, fmt.Sprintf("path_case is %q, but two paths of the document differ only in case; set to sensitive", scalarValue(pc)))
			line := m.lines[pcKey.Line-1]
			m.edit(pcKey.Line-1, pcKey.Line, strings.Replace(line, scalarValue(pc), "sensitive", 1))
		}
	}
	for _, r := range added {
		notes = append(notes, fmt.Sprintf("route %q (%s %s) added", r.Name, r.Method, r.Path))
	}
	out := m.apply()
	if err := checkMerged(config, out, ex2nodes(ex), added, res.PathCaseSensitive); err != nil {
		// A layout the line edits cannot follow (a top-level plain scalar
		// running over several lines, odd indentation): re-encode the whole
		// document from the updated tree instead. Comments are kept,
		// formatting is not.
		out = reencode(&doc, root, routesKey, routes, added, res.PathCaseSensitive)
		if err2 := checkMerged(config, out, ex2nodes(ex), added, res.PathCaseSensitive); err2 != nil {
			return nil, nil, fmt.Errorf("cannot merge into this config: %v", err2)
		}
		notes = append(notes, "the config's layout could not be edited line by line ("+err.Error()+"); it was re-encoded: comments kept, formatting not")
	}
	return out, notes, nil
}

// checkMerged verifies the merged text: it parses, every top-level key
// other than routes and path_case decodes as in config, routes are the
// existing entries (as updated) followed by added, and path_case is
// sensitive when wanted.
func checkMerged(config, merged []byte, existing []*yaml.Node, added []Route, caseSensitive bool) error {
	var before, after map[string]any
	if err := yaml.Unmarshal(config, &before); err != nil {
		return err
	}
	if err := yaml.Unmarshal(merged, &after); err != nil {
		return fmt.Errorf("the result does not parse: %v", oneLine(err))
	}
	for k, v := range before {
		if k != "routes" && k != "path_case" && fmt.Sprint(after[k]) != fmt.Sprint(v) {
			return fmt.Errorf("key %q changed", k)
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && k != "routes" && k != "path_case" {
			return fmt.Errorf("key %q appeared", k)
		}
	}
	var want []any
	for _, n := range existing {
		var v any
		if err := n.Decode(&v); err != nil {
			return err
		}
		want = append(want, v)
	}
	for _, r := range added {
		var v any
		if err := RouteNode(r).Decode(&v); err != nil {
			return err
		}
		want = append(want, v)
	}
	got, _ := after["routes"].([]any)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return errors.New("the routes did not come out as intended")
	}
	if caseSensitive && after["path_case"] != "sensitive" {
		return errors.New("path_case did not come out as intended")
	}
	return nil
}

// reencode is the whole document, encoded from the updated tree.
func reencode(doc, root, routesKey, routes *yaml.Node, added []Route, caseSensitive bool) []byte {
	if routes == nil || routes.Kind != yaml.SequenceNode {
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		if routesKey == nil {
			root.Content = append(root.Content, scalar("routes"), seq)
		} else {
			for i := 0; i < len(root.Content); i += 2 {
				if root.Content[i] == routesKey {
					root.Content[i+1] = seq
				}
			}
		}
		routes = seq
	}
	routes.Style &^= yaml.FlowStyle
	for _, r := range added {
		routes.Content = append(routes.Content, RouteNode(r))
	}
	if caseSensitive {
		if _, pc := lookup(root, "path_case"); pc != nil {
			pc.Value = "sensitive"
		} else {
			root.Content = append(root.Content, scalar("path_case"), scalar("sensitive"))
		}
	}
	if doc.Kind == 0 {
		return encode(root)
	}
	return encode(doc)
}

// addable checks a generated route g about to be appended to a config that
// has routes have and will also get added: a name already taken gets a
// suffix (with a note); a path ambiguous with a route of the same method
// would make the config invalid, so g is not added (ok false, with a note
// saying why).
func addable(g *Route, have, added []Route) (note string, ok bool) {
	all := append(slices.Clone(have), added...)
	t := pathtmpl.MustParse(g.Path)
	for _, r := range all {
		rt, err := pathtmpl.Parse(r.Path)
		if err != nil || r.Method != g.Method || !pathtmpl.Ambiguous(t, rt) {
			continue
		}
		ex, _ := pathtmpl.Overlap(t, rt)
		return fmt.Sprintf("route %q (%s %s) not added: it and route %q (%s %s) both match %s equally; write one by hand", g.Name, g.Method, g.Path, r.Name, r.Method, r.Path, ex), false
	}
	taken := func(n string) bool {
		return slices.ContainsFunc(all, func(r Route) bool { return r.Name == n })
	}
	if !taken(g.Name) {
		return "", true
	}
	name := g.Name
	for i := 2; taken(name); i++ {
		name = fmt.Sprintf("%s_%d", g.Name, i)
	}
	note = fmt.Sprintf("route name %q is taken; the route for %s %s is named %q", g.Name, g.Method, g.Path, name)
	g.Name = name
	return note, true
}

// updateRoute sets in n the keys of g the document states; it returns what
// it changed, and notes for changed values.
func updateRoute(n *yaml.Node, path string, sameShape bool, g Route) ([]change, []string) {
	var notes []string
	var changes []change
	name := scalarValue(func() *yaml.Node { _, v := lookup(n, "name"); return v }())
	// Keep a hand-written path whose parameters are only named differently;
	// a session parameter then takes the hand-written name.
	rename := map[string]string{}
	if sameShape {
		gt, pt := pathtmpl.MustParse(g.Path), pathtmpl.MustParse(path)
		for i, p := range gt.Params() {
			rename[p] = pt.Params()[i]
		}
	}
	if g.SessionParam != "" {
		if r, ok := rename[g.SessionParam]; ok {
			g.SessionParam = r
		}
	}
	want := routePairs(g)
	for _, p := range want {
		switch p.key {
		case "name":
			continue
		case "path":
			if sameShape {
				continue
			}
		}
		k, v := lookup(n, p.key)
		if v != nil && sameValue(v, p.val) {
			continue
		}
		changes = append(changes, change{key: k, old: v, val: p.val, name: p.key})
		if k == nil {
			n.Content = append(n.Content, scalar(p.key), p.val)
			if p.key != "method" {
				notes = append(notes, fmt.Sprintf("route %q: %s set from the document", name, p.key))
			}
			continue
		}
		notes = append(notes, fmt.Sprintf("route %q: %s changed from %s to %s (the document says so)", name, p.key, valueText(v), valueText(p.val)))
		p.val.LineComment, p.val.HeadComment, p.val.FootComment = v.LineComment, v.HeadComment, v.FootComment
		for i := 0; i < len(n.Content); i += 2 {
			if n.Content[i] == k {
				n.Content[i+1] = p.val
			}
		}
	}
	return changes, notes
}

// change is one key updateRoute set: old is nil for a key it added.
type change struct {
	name     string
	key, old *yaml.Node
	val      *yaml.Node
}

// valueText is n as one line of YAML, without its comments.
func valueText(n *yaml.Node) string {
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	return strings.TrimSpace(string(encode(&c)))
}

// sameValue compares two YAML values by what they decode to.
func sameValue(a, b *yaml.Node) bool {
	var x, y any
	if a.Decode(&x) != nil || b.Decode(&y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

func lookup(m *yaml.Node, key string) (k, v *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

func scalarValue(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// configKeyHeader is config's idempotency.header, or "".
func configKeyHeader(config []byte) string {
	var c struct {
		Idempotency struct {
			Header string `yaml:"header"`
		} `yaml:"idempotency"`
	}
	_ = yaml.Unmarshal(config, &c)
	return c.Idempotency.Header
}

// itemText is entry n re-encoded, its "-" at column dash, for lines
// [start, end) of the config. Comments that yaml.v3 attached to n but that
// stand outside those lines (it sometimes gives the head comment of the next
// entry to this one) stay where they are and are left out here.
func (m *merger) itemText(n *yaml.Node, dash, start, end int) string {
	inside := map[string]bool{}
	for _, l := range m.lines[start:end] {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") {
			inside[t] = true
		} else if i := strings.Index(l, " #"); i >= 0 {
			inside[strings.TrimSpace(l[i:])] = true
		}
	}
	keep := func(c string) string {
		var out []string
		for _, l := range strings.Split(c, "\n") {
			if inside[strings.TrimSpace(l)] {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	var filter func(*yaml.Node) *yaml.Node
	filter = func(x *yaml.Node) *yaml.Node {
		c := *x
		c.HeadComment, c.LineComment, c.FootComment = keep(c.HeadComment), keep(c.LineComment), keep(c.FootComment)
		c.Content = make([]*yaml.Node, len(x.Content))
		for i, k := range x.Content {
			c.Content[i] = filter(k)
		}
		return &c
	}
	c := filter(n)
	c.HeadComment = "" // it stays in place above the entry
	return indent(string(encode(&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{c}})), dash)
}

// patch edits the lines [start, end) of entry n in place for changes:
// each changed value is replaced on its own line, added keys are inserted
// after the entry's last line of content. It returns false, having done
// nothing, when n's layout does not allow it (a flow mapping, a value over
// several lines): the entry is then re-encoded whole.
func (m *merger) patch(n *yaml.Node, changes []change, start, end int) bool {
	if n.Style&yaml.FlowStyle != 0 {
		return false
	}
	type lineEdit struct {
		line int
		text string
	}
	var edits []lineEdit
	var adds []*yaml.Node
	for _, c := range changes {
		if c.old == nil {
			adds = append(adds, scalar(c.name), c.val)
			continue
		}
		l := c.old.Line - 1
		if c.old.Line != c.key.Line || l < start || l >= end || c.old.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 ||
			c.old.Kind != yaml.ScalarNode && c.old.Style&yaml.FlowStyle == 0 {
			return false
		}
		line := m.lines[l]
		from := byteOffset(line, c.old.Column-1)
		to, ok := valueEnd(line, from, c.old)
		if !ok {
			return false
		}
		edits = append(edits, lineEdit{l, line[:from] + valueText(c.val) + line[to:]})
	}
	for _, e := range edits {
		m.edit(e.line, e.line+1, e.text)
	}
	if len(adds) > 0 {
		at := end
		for at > start+1 {
			t := strings.TrimSpace(m.lines[at-1])
			if t != "" && t[0] != '#' {
				break
			}
			at--
		}
		text := string(encode(&yaml.Node{Kind: yaml.MappingNode, Content: adds}))
		m.edit(at, at, indent(text, n.Column-1))
	}
	return true
}

// byteOffset converts a 0-based column in runes to a byte offset in line.
func byteOffset(line string, col int) int {
	for i := range line {
		if col == 0 {
			return i
		}
		col--
	}
	return len(line)
}

// valueEnd is the byte offset just past value v, which starts at from on
// line: a flow collection ends at its matching bracket on this line; a
// scalar runs to its line comment or the end of the line.
func valueEnd(line string, from int, v *yaml.Node) (int, bool) {
	if v.Kind != yaml.ScalarNode {
		depth := 0
		var quote byte
		for i := from; i < len(line); i++ {
			c := line[i]
			switch {
			case quote != 0:
				if c == quote {
					quote = 0
				} else if c == '\\' && quote == '"' {
					i++
				}
			case c == '"' || c == '\'':
				quote = c
			case c == '[' || c == '{':
				depth++
			case c == ']' || c == '}':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	}
	rest := strings.TrimRight(line, "\r\n")
	if i := strings.Index(rest[from:], " #"); i >= 0 && v.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
		rest = rest[:from+i]
	} else if v.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 {
		q := line[from]
		for i := from + 1; i < len(rest); i++ {
			if rest[i] == q && (q == '\'' && (i+1 >= len(rest) || rest[i+1] != '\'') || q == '"' && rest[i-1] != '\\') {
				return i + 1, true
			}
			if q == '\'' && rest[i] == '\'' {
				i++
			}
		}
		return 0, false
	}
	return len(strings.TrimRight(rest, " \t")), true
}

func indent(text string, n int) string {
	if n == 0 {
		return text
	}
	pad := strings.Repeat(" ", n)
	lines := strings.SplitAfter(text, "\n")
	for i, l := range lines {
		if l != "" && l != "\n" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "")
}

func ensureNewline(lines []string) string {
	if len(lines) > 0 && !strings.HasSuffix(lines[len(lines)-1], "\n") {
		return "\n"
	}
	return ""
}

// merger edits the config's lines.
type merger struct {
	lines []string // each with its "\n" (the last may lack it)
	root  *yaml.Node
	edits []edit
}

type edit struct {
	from, to int // lines [from, to) replaced
	text     string
	seq      int // order of recording
}

func (m *merger) edit(from, to int, text string) {
	m.edits = append(m.edits, edit{from: from, to: to, text: text})
}

func (m *merger) apply() []byte {
	// Bottom up. At one line, a replacement goes before an insertion (so the
	// insertion lands above what replaced the line), and insertions go in
	// reverse order of recording (so the first recorded ends up on top).
	for i := range m.edits {
		m.edits[i].seq = i
	}
	slices.SortFunc(m.edits, func(a, b edit) int {
		if a.from != b.from {
			return b.from - a.from
		}
		if a.to != b.to {
			return b.to - a.to
		}
		return b.seq - a.seq
	})
	lines := m.lines
	for _, e := range m.edits {
		repl := strings.SplitAfter(e.text, "\n")
		if repl[len(repl)-1] == "" {
			repl = repl[:len(repl)-1]
		}
		lines = slices.Concat(lines[:e.from], repl, lines[e.to:])
	}
	return []byte(strings.Join(lines, ""))
}

// itemStart is the 0-based line of the "-" that starts entry it.
func (m *merger) itemStart(it *yaml.Node, dash int) int {
	for l := it.Line - 1; l >= 0; l-- {
		s := m.lines[l]
		if len(s) > dash && s[dash] == '-' && strings.TrimSpace(s[:dash]) == "" {
			return l
		}
	}
	return it.Line - 1
}

// blockEnd is the line after the block that starts at line start with a
// "-" or key at column col: the first later line with content at a smaller
// column, or at col but not a "-", with trailing blank and comment lines
// left out.
func (m *merger) blockEnd(start, col int) int {
	l := start + 1
	for ; l < len(m.lines); l++ {
		s := strings.TrimRight(m.lines[l], "\r\n")
		t := strings.TrimLeft(s, " ")
		if t == "" || t[0] == '#' {
			continue
		}
		ind := len(s) - len(t)
		if ind < col || ind == col && t[0] != '-' {
			break
		}
		if ind == col && t[0] == '-' && col == m.dashColOf(start) {
			break // the next entry of the same list
		}
	}
	return m.trimTrailing(l, col)
}

// dashColOf is the column of the "-" on line l, or -1.
func (m *merger) dashColOf(l int) int {
	s := m.lines[l]
	t := strings.TrimLeft(s, " ")
	if strings.HasPrefix(t, "-") {
		return len(s) - len(t)
	}
	return -1
}

// trimTrailing moves end back over blank lines and comment lines at column
// col or less: they belong to what follows.
func (m *merger) trimTrailing(end, col int) int {
	for end > 0 {
		s := strings.TrimRight(m.lines[end-1], "\r\n")
		t := strings.TrimLeft(s, " ")
		if t == "" || t[0] == '#' && len(s)-len(t) <= col {
			end--
			continue
		}
		break
	}
	return end
}

func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	parts := strings.SplitAfter(string(b), "\n")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	return parts
}
