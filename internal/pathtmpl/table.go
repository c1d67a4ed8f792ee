package pathtmpl

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrAmbiguous is wrapped by the error [NewTable] returns for two entries
// with the same method and [Ambiguous] templates.
var ErrAmbiguous = errors.New("ambiguous routes")

// Entry is one route of a [Table]: an exact method, a template, and the
// caller's index for the route (for example its position in the config).
type Entry struct {
	// Method is matched exactly, case kept: HEAD is not GET, "post" is not POST.
	Method string
	// Template is the route's path template; it must not be nil.
	Template *Template
	// Index is returned by [Table.Lookup] when this entry wins.
	Index int
}

// Table finds the route for a request. It is immutable and safe for
// concurrent use; build it with [NewTable].
type Table struct {
	// methods maps a method to its entries grouped by segment count (the
	// number of "/" in a matching path); each group is sorted by literal
	// count, most literal first.
	methods map[string][][]Entry
}

// NewTable builds a table from entries. It fails, naming both entries, when
// two entries with the same method have [Ambiguous] templates (the error
// wraps [ErrAmbiguous]), and when an entry has an empty method or a nil
// template.
func NewTable(entries []Entry) (*Table, error) {
	t := &Table{methods: make(map[string][][]Entry)}
	var errs []error
	for i, e := range entries {
		if e.Method == "" || e.Template == nil {
			errs = append(errs, fmt.Errorf("pathtmpl: entry %d (index %d): empty method or nil template", i, e.Index))
			continue
		}
		for _, o := range entries[:i] {
			if o.Method == e.Method && o.Template != nil && Ambiguous(o.Template, e.Template) {
				errs = append(errs, fmt.Errorf("%w: %s %s (index %d) and %s %s (index %d)",
					ErrAmbiguous, o.Method, o.Template, o.Index, e.Method, e.Template, e.Index))
			}
		}
		byN := t.methods[e.Method]
		n := len(e.Template.segs)
		for len(byN) <= n {
			byN = append(byN, nil)
		}
		byN[n] = append(byN[n], e)
		t.methods[e.Method] = byN
	}
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
// template matches escapedPath with the most literal segments. It reports
// false when no entry matches. It does not allocate.
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
