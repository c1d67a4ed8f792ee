package gql

import (
	"errors"
	"slices"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/idemgate/idemgate/internal/canonjson"
)

// ErrSyntax is returned by [AppendNormalized] for a document that is not
// valid UTF-8 or that the GraphQL parser refuses.
var ErrSyntax = errors.New("gql: document does not parse")

// AppendNormalized appends the canonical text of the GraphQL document query
// to dst (see the package documentation, "Normalization"): the operation
// that operationName selects and the fragments it uses, or the whole
// document when it selects none. It returns dst unchanged and [ErrSyntax]
// when the document does not parse.
//
// The output is a valid document that normalizes to itself. It is compact:
// one space between definitions and between selections, none elsewhere
// unless two names would run together, e.g.
//
//	mutation Pay($id:ID!){pay(orderId:$id){id status}}
func AppendNormalized(dst []byte, query, operationName string) ([]byte, error) {
	doc := parse(query)
	if doc == nil {
		return dst, ErrSyntax
	}
	if op := selectOperation(doc, operationName); op != nil {
		return appendOperation(dst, doc, op), nil
	}
	return appendDocument(dst, doc), nil
}

// appendDocument prints every definition of doc, in document order:
// operations first, then fragments, as the parser keeps them apart.
func appendDocument(dst []byte, doc *ast.QueryDocument) []byte {
	p := printer{b: dst}
	for i, op := range doc.Operations {
		if i > 0 {
			p.b = append(p.b, ' ')
		}
		p.operation(op)
	}
	for i, f := range doc.Fragments {
		if i > 0 || len(doc.Operations) > 0 {
			p.b = append(p.b, ' ')
		}
		p.fragment(f)
	}
	return p.b
}

// appendOperation prints op and, sorted by name, the fragments it uses. A
// name that several fragments share (an invalid document) prints all of
// them, in document order.
func appendOperation(dst []byte, doc *ast.QueryDocument, op *ast.OperationDefinition) []byte {
	p := printer{b: dst}
	p.operation(op)
	for _, f := range usedFragments(doc, op) {
		p.b = append(p.b, ' ')
		p.fragment(f)
	}
	return p.b
}

// usedFragments returns the fragment definitions that op spreads, directly
// or through other fragments, sorted by name (stable).
func usedFragments(doc *ast.QueryDocument, op *ast.OperationDefinition) []*ast.FragmentDefinition {
	if len(doc.Fragments) == 0 {
		return nil
	}
	used := map[string]bool{}
	var queue []string
	var visit func(ast.SelectionSet)
	visit = func(set ast.SelectionSet) {
		for _, sel := range set {
			switch s := sel.(type) {
			case *ast.Field:
				visit(s.SelectionSet)
			case *ast.InlineFragment:
				visit(s.SelectionSet)
			case *ast.FragmentSpread:
				if !used[s.Name] {
					used[s.Name] = true
					queue = append(queue, s.Name)
				}
			}
		}
	}
	visit(op.SelectionSet)
	byName := fragmentsByName(doc)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		for _, f := range byName[name] {
			visit(f.SelectionSet)
		}
	}
	var out []*ast.FragmentDefinition
	for _, f := range doc.Fragments {
		if used[f.Name] {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(a, b *ast.FragmentDefinition) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// fragmentsByName indexes doc's fragment definitions by name, so that
// resolving spreads stays linear in the size of hostile documents. Several
// definitions with one name (an invalid document) keep their order.
func fragmentsByName(doc *ast.QueryDocument) map[string][]*ast.FragmentDefinition {
	m := make(map[string][]*ast.FragmentDefinition, len(doc.Fragments))
	for _, f := range doc.Fragments {
		m[f.Name] = append(m[f.Name], f)
	}
	return m
}

// printer prints AST nodes in canonical form. Recursion is bounded by the
// parser's own nesting limit (parser.MaxNestingDepth).
type printer struct{ b []byte }

func (p *printer) operation(op *ast.OperationDefinition) {
	p.b = append(p.b, op.Operation...)
	if op.Name != "" {
		p.b = append(p.b, ' ')
		p.b = append(p.b, op.Name...)
	}
	p.variableDefinitions(op.VariableDefinitions)
	p.directives(op.Directives)
	p.selectionSet(op.SelectionSet)
}

func (p *printer) fragment(f *ast.FragmentDefinition) {
	p.b = append(p.b, "fragment "...)
	p.b = append(p.b, f.Name...)
	p.variableDefinitions(f.VariableDefinition)
	p.b = append(p.b, " on "...)
	p.b = append(p.b, f.TypeCondition...)
	p.directives(f.Directives)
	p.selectionSet(f.SelectionSet)
}

func (p *printer) variableDefinitions(defs ast.VariableDefinitionList) {
	if len(defs) == 0 {
		return
	}
	printList(p, defs, '(', ',', ')', func(d *ast.VariableDefinition) {
		p.b = append(p.b, '$')
		p.b = append(p.b, d.Variable...)
		p.b = append(p.b, ':')
		p.typ(d.Type)
		if d.DefaultValue != nil {
			p.b = append(p.b, '=')
			p.value(d.DefaultValue)
		}
		p.directives(d.Directives)
	})
}

// printList prints items between open and close, separated by sep, each
// with item.
func printList[T any](p *printer, items []T, open, sep, close byte, item func(T)) {
	p.b = append(p.b, open)
	for i, x := range items {
		if i > 0 {
			p.b = append(p.b, sep)
		}
		item(x)
	}
	p.b = append(p.b, close)
}

func (p *printer) typ(t *ast.Type) {
	switch {
	case t == nil:
		return
	case t.NamedType != "":
		p.b = append(p.b, t.NamedType...)
	default:
		p.b = append(p.b, '[')
		p.typ(t.Elem)
		p.b = append(p.b, ']')
	}
	if t.NonNull {
		p.b = append(p.b, '!')
	}
}

func (p *printer) directives(dirs ast.DirectiveList) {
	for _, d := range dirs {
		p.b = append(p.b, '@')
		p.b = append(p.b, d.Name...)
		p.arguments(d.Arguments)
	}
}

func (p *printer) arguments(args ast.ArgumentList) {
	if len(args) == 0 {
		return
	}
	printList(p, args, '(', ',', ')', func(a *ast.Argument) {
		p.b = append(p.b, a.Name...)
		p.b = append(p.b, ':')
		p.value(a.Value)
	})
}

func (p *printer) selectionSet(set ast.SelectionSet) {
	if len(set) == 0 {
		return
	}
	printList(p, set, '{', ' ', '}', func(sel ast.Selection) {
		switch s := sel.(type) {
		case *ast.Field:
			if s.Alias != "" && s.Alias != s.Name {
				p.b = append(p.b, s.Alias...)
				p.b = append(p.b, ':')
			}
			p.b = append(p.b, s.Name...)
			p.arguments(s.Arguments)
			p.directives(s.Directives)
			p.selectionSet(s.SelectionSet)
		case *ast.FragmentSpread:
			p.b = append(p.b, "..."...)
			p.b = append(p.b, s.Name...)
			p.directives(s.Directives)
		case *ast.InlineFragment:
			p.b = append(p.b, "..."...)
			if s.TypeCondition != "" {
				p.b = append(p.b, "on "...)
				p.b = append(p.b, s.TypeCondition...)
			}
			p.directives(s.Directives)
			p.selectionSet(s.SelectionSet)
		}
	})
}

func (p *printer) value(v *ast.Value) {
	if v == nil {
		return
	}
	switch v.Kind {
	case ast.Variable:
		p.b = append(p.b, '$')
		p.b = append(p.b, v.Raw...)
	case ast.StringValue, ast.BlockValue:
		p.b = appendString(p.b, v.Raw)
	case ast.ListValue:
		printList(p, v.Children, '[', ',', ']', func(c *ast.ChildValue) { p.value(c.Value) })
	case ast.ObjectValue:
		printList(p, v.Children, '{', ',', '}', func(c *ast.ChildValue) {
			p.b = append(p.b, c.Name...)
			p.b = append(p.b, ':')
			p.value(c.Value)
		})
	default: // IntValue, FloatValue, BooleanValue, NullValue, EnumValue
		p.b = append(p.b, v.Raw...)
	}
}

// appendString appends s as a GraphQL string literal: `\"` and `\\`, the
// short escapes \b \f \n \r \t, \u00xx for the other characters below
// U+0020 (the lexer refuses them raw), and raw UTF-8 for everything else.
// The lexer decodes each of these back to the same bytes, which makes
// printing idempotent; block strings, whose value the lexer has already
// dedented, print the same way.
func appendString(b []byte, s string) []byte { return canonjson.AppendQuoted(b, s) }
