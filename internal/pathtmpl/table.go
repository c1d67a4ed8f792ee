package pathtmpl

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrAmbiguous is wrapped by the error [NewTable] returns for two entries
// with the same method (compared case-insensitively) and templates that are
// [AmbiguousNormalized] under the table's [Case].
var ErrAmbiguous = errors.New("ambiguous routes")

// Entry is one route of a [Table]: an exact method, a template, and the
// caller's index for the route (for example its position in the config).
type Entry struct {
	// Method is matched exactly by [Table.Lookup] (HEAD is not GET, "post"
	// is not POST) and case-insensitively by [Table.Match] ("post" is POST).
	Method string
	// Template is the route's path template; it must not be nil.
	Template *Template
	// Index is returned by [Table.Lookup] when this entry wins.
	Index int
	// Protected marks a route with any protection (idempotent, require_key,
	// session, rate_limit): a request whose spellings disagree and one of
	// which reaches it is refused, and so is a path that cannot be
	// normalized on a table with any protected entry (see [Table.Match]).
	Protected bool
}

// Table finds the route for a request. It is immutable and safe for
// concurrent use; build it with [NewTable].
type Table struct {
	// methods maps a method to its entries grouped by segment count (the
	// number of "/" in a matching path); each group is sorted by literal
	// count, most literal first.
	methods map[string][][]Entry

	// norm maps an upper-case method to its entries for [Table.Match],
	// grouped by normalized segment count and sorted like methods.
	norm      map[string][][]normEntry
	fold      Case
	protected bool // some entry is Protected
}

// NewTable builds a table from entries whose literal segments compare
// case-insensitively in [Table.Match]; it is NewTableOptions(entries,
// Options{}).
func NewTable(entries []Entry) (*Table, error) {
	return NewTableOptions(entries, Options{})
}

// NewTableOptions builds a table from entries. It fails, naming both
// entries, when two entries whose methods are equal case-insensitively have
// templates that are [AmbiguousNormalized] under o.Case (the error wraps
// [ErrAmbiguous]) — which includes every pair of [Ambiguous] templates —
// and when an entry has an empty method or a nil template.
func NewTableOptions(entries []Entry, o Options) (*Table, error) {
	t := &Table{methods: make(map[string][][]Entry)}
	var errs []error
	for i, e := range entries {
		if e.Method == "" || e.Template == nil {
			errs = append(errs, fmt.Errorf("pathtmpl: entry %d (index %d): empty method or nil template", i, e.Index))
			continue
		}
		byN := t.methods[e.Method]
		n := len(e.Template.segs)
		for len(byN) <= n {
			byN = append(byN, nil)
		}
		byN[n] = append(byN[n], e)
		t.methods[e.Method] = byN
	}
	errs = append(errs, t.buildNorm(entries, o)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, byN := range t.methods {
		for _, group := range byN {
			// Stable, so that equal literal counts (never both matching one
			// path, as ambiguity was refused above) keep the caller's order.
			slices.SortStableFunc(group, func(a, b Entry) int {
				return cmp.Compare(b.Template.literals, a.Template.literals)
			})
		}
	}
	return t, nil
}

// Lookup returns the index of the entry whose method equals method and whose
// template matches escapedPath byte for byte ([Template.Match]) with the
// most literal segments. It reports false when no entry matches. It does
// not allocate. It is the matching of the first release, which spellings
// bypass; a proxy uses [Table.Match].
func (t *Table) Lookup(method, escapedPath string) (index int, ok bool) {
	if t == nil || len(escapedPath) == 0 || escapedPath[0] != '/' {
		return 0, false
	}
	byN := t.methods[method]
	n := strings.Count(escapedPath, "/")
	if n >= len(byN) {
		return 0, false
	}
	for _, e := range byN[n] {
		if e.Template.Match(escapedPath) {
			return e.Index, true
		}
	}
	return 0, false
}
