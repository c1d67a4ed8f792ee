package gql

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/idemgate/idemgate/internal/canonjson"
)

// Errors that [ParseRequest] wraps; check them with errors.Is.
var (
	// ErrUnsupportedMediaType: the Content-Type is neither JSON nor
	// application/graphql (for example multipart/form-data uploads).
	ErrUnsupportedMediaType = errors.New("gql: unsupported media type")
	// ErrInvalidRequest: the body is not one GraphQL request object.
	ErrInvalidRequest = errors.New("gql: not a GraphQL request")
)

// Kind is the type of the operation a request runs.
type Kind uint8

// The kinds of operation. The zero Kind is KindUnknown.
const (
	// KindUnknown: the request has no document (a persisted query sent by
	// hash only, which may well be a mutation), or its document does not
	// parse, holds no operation, or operationName selects none (or
	// several). Such a request is keyed like a mutation: the upstream's
	// answer tells whether it ran (see [ReleaseOnAnswer]); one the upstream
	// refuses releases its key.
	KindUnknown Kind = iota
	KindQuery
	KindMutation
	KindSubscription
)

// String returns "unknown", "query", "mutation" or "subscription".
func (k Kind) String() string {
	switch k {
	case KindQuery:
		return "query"
	case KindMutation:
		return "mutation"
	case KindSubscription:
		return "subscription"
	}
	return "unknown"
}

// Operation describes the operation a request selects, as the GraphQL spec's
// GetOperation does: the one named by operationName, or the only operation
// of the document when operationName is absent, null or "". A name that no
// operation or several operations carry, or an absent name in a document of
// several operations, selects nothing (Kind is [KindUnknown]).
type Operation struct {
	// Kind is the operation's type.
	Kind Kind
	// Name is the selected operation's name; "" when it is anonymous or
	// none is selected.
	Name string
	// Fields holds, for a mutation only, the response keys (alias, else
	// name) of its top-level fields, in document order, with fragments at
	// the top level expanded. A key that several fields share counts once
	// (GraphQL merges them and runs the field once). Fields named
	// __typename are left out (they write nothing), and so are fields that
	// @skip(if: true) or @include(if: false) leave out, with the condition a
	// literal or a variable whose value or default is a boolean; any other
	// condition counts the field. So len(Fields) is the number of mutations
	// the request runs, or more, never fewer.
	Fields []string
}

// A Request is a parsed GraphQL-over-HTTP request. Its zero value is an
// empty request of [KindUnknown]. A Request is immutable once
// [ParseRequest] returns it and safe for concurrent use; it does not retain
// the body it was parsed from.
type Request struct {
	query         string
	operationName string
	variables     []byte // canonical JSON; nil for absent, null or {}
	hash          string // extensions.persistedQuery.sha256Hash
	rest          []byte // canonical JSON of the other members; nil when there are none
	op            Operation
	form          byte   // how normalized was made: formOperation, formDocument or formRaw
	normalized    []byte // see form
}

// Query returns the GraphQL document as sent; "" when the request has none
// (a persisted query sent by hash only).
func (r Request) Query() string { return r.query }

// OperationName returns the operationName member; "" when it is absent or
// null.
func (r Request) OperationName() string { return r.operationName }

// Variables returns the canonical JSON of the variables member (see
// internal/canonjson), or nil when they are absent, null or {}. The caller
// must not modify it.
func (r Request) Variables() []byte { return r.variables }

// PersistedQueryHash returns extensions.persistedQuery.sha256Hash, or "".
func (r Request) PersistedQueryHash() string { return r.hash }

// Operation returns the operation the request selects. Its Fields are
// shared: the caller must not modify them.
func (r Request) Operation() Operation { return r.op }

// Keyed reports whether the request's Idempotency-Key is honoured: true for
// mutations and for [KindUnknown] (which may write, or be refused by the
// upstream: the answer then releases the key), false for queries and
// subscriptions, which pass through and ignore the key.
func (r Request) Keyed() bool {
	return r.op.Kind == KindMutation || r.op.Kind == KindUnknown
}

type mediaType uint8

const (
	mediaJSON mediaType = iota
	mediaGraphQL
)

// mediaOf classifies a Content-Type: empty (GraphQL servers commonly assume
// JSON then), application/json or application/*+json, or
// application/graphql.
func mediaOf(contentType string) (mediaType, error) {
	switch contentType {
	case "", "application/json":
		return mediaJSON, nil
	case "application/graphql":
		return mediaGraphQL, nil
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, fmt.Errorf("%w %q", ErrUnsupportedMediaType, contentType)
	}
	switch {
	case mt == "application/json", strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return mediaJSON, nil
	case mt == "application/graphql":
		return mediaGraphQL, nil
	}
	return 0, fmt.Errorf("%w %q", ErrUnsupportedMediaType, mt)
}

// The members of a GraphQL request object that are fingerprinted on their
// own rather than as part of the rest.
var (
	restIgnore = []canonjson.Pointer{
		mustPointer("/query"), mustPointer("/operationName"), mustPointer("/variables"),
	}
	restIgnoreAll = append(restIgnore[:len(restIgnore):len(restIgnore)], mustPointer("/extensions"))
)

func mustPointer(s string) canonjson.Pointer {
	p, err := canonjson.ParsePointer(s)
	if err != nil {
		panic(err)
	}
	return p
}

// The members of a GraphQL request object (GraphQL over HTTP, "Request
// Parameters").
var memberNames = [...]string{"query", "operationName", "variables", "extensions"}

// ParseRequest parses a GraphQL-over-HTTP POST body.
//
// contentType is the request's Content-Type header. application/json (and
// application/*+json, with any parameters), or no Content-Type at all, is a
// JSON object with the members query, operationName, variables and
// extensions (extensions.persistedQuery.sha256Hash is read for persisted
// queries); application/graphql is the document itself. Other media types
// wrap [ErrUnsupportedMediaType].
//
// A body that is not one GraphQL request object wraps [ErrInvalidRequest]:
// not exactly one JSON object (a batch array, invalid JSON or UTF-8,
// duplicate member names anywhere, as internal/canonjson refuses them), a
// member of the wrong type (query and operationName must be strings or null,
// variables, extensions and persistedQuery objects or null, sha256Hash a
// string or null), a member whose name differs from a standard one only
// in case (some servers match names case-insensitively, so its meaning would
// be ambiguous), neither a query nor a persisted-query hash, or an empty
// application/graphql body.
//
// A document that does not parse is not an error: the Request is then of
// [KindUnknown] and fingerprinted by its raw text, and the upstream's answer
// decides whether anything ran.
func ParseRequest(contentType string, body []byte) (Request, error) {
	media, err := mediaOf(contentType)
	if err != nil {
		return Request{}, err
	}
	var r Request
	if media == mediaGraphQL {
		if len(bytes.TrimSpace(body)) == 0 {
			return Request{}, fmt.Errorf("%w: empty application/graphql body", ErrInvalidRequest)
		}
		r.query = string(body)
	} else if err := r.parseJSON(body); err != nil {
		return Request{}, err
	}
	r.analyze()
	return r, nil
}

// parseJSON fills r from a JSON request object.
func (r *Request) parseJSON(body []byte) error {
	if i := skipSpace(body, 0); i == len(body) || body[i] != '{' {
		return fmt.Errorf("%w: the body is not a JSON object", ErrInvalidRequest)
	}
	// canonjson refuses everything that is not one strict JSON value with
	// unique member names; with that checked, the light scanner below
	// (forEachMember) reads it exactly.
	rest, ok := canonjson.Append(nil, body, restIgnore)
	if !ok {
		return fmt.Errorf("%w: invalid JSON or duplicate member names", ErrInvalidRequest)
	}
	var query, opName, vars, ext []byte
	err := forEachMember(body, func(name, value []byte) error {
		switch string(name) {
		case "query":
			query = value
		case "operationName":
			opName = value
		case "variables":
			vars = value
		case "extensions":
			ext = value
		default:
			for _, std := range memberNames {
				if bytes.EqualFold(name, []byte(std)) {
					// The name is client input: keep it out of errors, which get logged.
					return fmt.Errorf("%w: a member name differs from %q only in case", ErrInvalidRequest, std)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if ext != nil && (isNull(ext) || isEmptyObject(ext)) {
		// Absent, null and {} extensions are the same request.
		rest, _ = canonjson.Append(rest[:0], body, restIgnoreAll)
		ext = nil
	}
	if string(rest) != "{}" {
		r.rest = rest // nil otherwise, as for application/graphql
	}
	if r.query, err = decodeOptional(query); err != nil {
		return fmt.Errorf("%w: query: %v", ErrInvalidRequest, err)
	}
	if r.operationName, err = decodeOptional(opName); err != nil {
		return fmt.Errorf("%w: operationName: %v", ErrInvalidRequest, err)
	}
	if vars != nil && !isNull(vars) {
		if vars[0] != '{' {
			return fmt.Errorf("%w: variables is not an object", ErrInvalidRequest)
		}
		if !isEmptyObject(vars) {
			r.variables, _ = canonjson.Append(nil, vars, nil) // valid: checked above
		}
	}
	if ext != nil && !isNull(ext) {
		if r.hash, err = persistedQueryHash(ext); err != nil {
			return err
		}
	}
	if r.query == "" && r.hash == "" {
		return fmt.Errorf("%w: neither a query nor a persisted-query hash", ErrInvalidRequest)
	}
	return nil
}

// persistedQueryHash returns extensions.persistedQuery.sha256Hash from ext,
// the extensions member's valid JSON value.
func persistedQueryHash(ext []byte) (string, error) {
	if ext[0] != '{' {
		return "", fmt.Errorf("%w: extensions is not an object", ErrInvalidRequest)
	}
	var pq, hash []byte
	_ = forEachMember(ext, func(name, value []byte) error {
		if string(name) == "persistedQuery" {
			pq = value
		}
		return nil
	})
	if pq == nil || isNull(pq) {
		return "", nil
	}
	if pq[0] != '{' {
		return "", fmt.Errorf("%w: extensions.persistedQuery is not an object", ErrInvalidRequest)
	}
	_ = forEachMember(pq, func(name, value []byte) error {
		if string(name) == "sha256Hash" {
			hash = value
		}
		return nil
	})
	h, err := decodeOptional(hash)
	if err != nil {
		return "", fmt.Errorf("%w: extensions.persistedQuery.sha256Hash: %v", ErrInvalidRequest, err)
	}
	return h, nil
}

// forEachMember calls fn with the decoded name and the raw value of each
// member of obj, a JSON object that canonjson has accepted (so it is valid
// and the scanner need not check anything), in order, until fn returns an
// error.
func forEachMember(obj []byte, fn func(name, value []byte) error) error {
	i := skipSpace(obj, 0) + 1 // past '{'
	for {
		i = skipSpace(obj, i)
		if obj[i] == '}' {
			return nil
		}
		start := i
		i = skipString(obj, i)
		name := obj[start+1 : i-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var s string
			_ = json.Unmarshal(obj[start:i], &s)
			name = []byte(s)
		}
		i = skipSpace(obj, skipSpace(obj, i)+1) // past ':'
		start = i
		i = skipValue(obj, i)
		if err := fn(name, obj[start:i]); err != nil {
			return err
		}
		if i = skipSpace(obj, i); obj[i] == ',' {
			i++
		}
	}
}

// skipString returns the index after the JSON string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the valid JSON value that starts at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = skipString(b, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1
			}
		default:
			if depth == 0 { // a number or literal
				for i < len(b) && !isDelimiter(b[i]) {
					i++
				}
				return i
			}
		}
		i++
	}
	return i
}

func isDelimiter(c byte) bool {
	return c == ',' || c == '}' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// decodeOptional decodes raw, a valid JSON string or null (or nil, for an
// absent member).
func decodeOptional(raw []byte) (string, error) {
	if raw == nil || isNull(raw) {
		return "", nil
	}
	if raw[0] != '"' {
		return "", errors.New("not a string")
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// isNull reports whether raw, one JSON value without surrounding space (as
// encoding/json hands out json.RawMessage members), is null.
func isNull(raw []byte) bool { return string(raw) == "null" }

// isEmptyObject reports whether raw, one valid JSON value, is {}.
func isEmptyObject(raw []byte) bool {
	return raw[0] == '{' && skipSpace(raw, 1) == len(raw)-1
}

// skipSpace returns the index of the first byte at or after b[i] that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// analyze parses r.query, selects the operation and normalizes the document.
func (r *Request) analyze() {
	r.form = formRaw
	r.normalized = nil
	if r.query == "" {
		return
	}
	doc := parse(r.query)
	if doc == nil {
		return
	}
	op := selectOperation(doc, r.operationName)
	if op == nil {
		r.form = formDocument
		r.normalized = appendDocument(nil, doc)
		return
	}
	r.form = formOperation
	r.normalized = appendOperation(nil, doc, op)
	r.op = Operation{Kind: kindOf(op.Operation), Name: op.Name}
	if r.op.Kind == KindMutation {
		r.op.Fields = topLevelFields(doc, op, r.variables)
	}
}

// parse parses a GraphQL executable document, or returns nil. Documents
// that are not valid UTF-8 are refused here: the parser would let some
// invalid bytes through and replace others, so two different documents
// could print alike.
func parse(query string) (doc *ast.QueryDocument) {
	if !utf8.ValidString(query) {
		return nil
	}
	// The parser bounds its own recursion (parser.MaxNestingDepth), so
	// hostile input fails with an error. Should a parser bug still panic,
	// the request is simply one that does not parse: the upstream decides.
	defer func() {
		if recover() != nil {
			doc = nil
		}
	}()
	doc, err := parser.ParseQuery(&ast.Source{Input: query})
	if err != nil || len(doc.Operations)+len(doc.Fragments) == 0 {
		return nil // the spec's Document holds at least one definition
	}
	return doc
}

func kindOf(op ast.Operation) Kind {
	switch op {
	case ast.Query:
		return KindQuery
	case ast.Mutation:
		return KindMutation
	case ast.Subscription:
		return KindSubscription
	}
	return KindUnknown
}

// selectOperation is the GraphQL spec's GetOperation (§6.1): nil when the
// name selects no operation or several (an invalid document).
func selectOperation(doc *ast.QueryDocument, name string) *ast.OperationDefinition {
	if name == "" {
		if len(doc.Operations) == 1 {
			return doc.Operations[0]
		}
		return nil
	}
	var found *ast.OperationDefinition
	for _, op := range doc.Operations {
		if op.Name == name {
			if found != nil {
				return nil
			}
			found = op
		}
	}
	return found
}

// topLevelFields returns the response keys of op's top-level fields (see
// [Operation.Fields]).
func topLevelFields(doc *ast.QueryDocument, op *ast.OperationDefinition, variables []byte) []string {
	c := fieldCollector{doc: doc, op: op, variables: variables, seen: map[string]bool{}}
	c.collect(op.SelectionSet)
	return c.fields
}

type fieldCollector struct {
	doc       *ast.QueryDocument
	op        *ast.OperationDefinition
	variables []byte
	fragments map[string][]*ast.FragmentDefinition // built at the first spread
	vars      map[string]json.RawMessage           // decoded lazily from variables
	seen      map[string]bool                      // response keys and "...Name" spreads already expanded
	fields    []string
}

// collect walks set depth-first in document order, with an explicit stack:
// chains of fragment spreads can nest as deep as the document is long,
// beyond the parser's nesting limit.
func (c *fieldCollector) collect(set ast.SelectionSet) {
	type frame struct {
		set ast.SelectionSet
		i   int
	}
	stack := []frame{{set: set}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.i == len(top.set) {
			stack = stack[:len(stack)-1]
			continue
		}
		sel := top.set[top.i]
		top.i++
		switch s := sel.(type) {
		case *ast.Field:
			if s.Name == "__typename" || !c.included(s.Directives) {
				continue
			}
			key := s.Alias
			if key == "" {
				key = s.Name
			}
			if !c.seen[key] {
				c.seen[key] = true
				c.fields = append(c.fields, key)
			}
		case *ast.InlineFragment:
			if c.included(s.Directives) {
				stack = append(stack, frame{set: s.SelectionSet})
			}
		case *ast.FragmentSpread:
			// Response keys never start with "...", so one map serves
			// both; expanding a fragment once also stops cycles.
			spread := "..." + s.Name
			if c.seen[spread] || !c.included(s.Directives) {
				continue
			}
			c.seen[spread] = true
			if c.fragments == nil {
				c.fragments = fragmentsByName(c.doc)
			}
			defs := c.fragments[s.Name]
			for i := len(defs) - 1; i >= 0; i-- { // the first on top
				stack = append(stack, frame{set: defs[i].SelectionSet})
			}
		}
	}
}

// included reports false only when @skip or @include certainly leave the
// selection out.
func (c *fieldCollector) included(dirs ast.DirectiveList) bool {
	for _, d := range dirs {
		var drop bool
		switch d.Name {
		case "skip":
			drop = true
		case "include":
			drop = false
		default:
			continue
		}
		if v, ok := c.condition(d); ok && v == drop {
			return false
		}
	}
	return true
}

// condition returns the boolean value of directive d's "if" argument when
// it is known.
func (c *fieldCollector) condition(d *ast.Directive) (value, ok bool) {
	arg := d.Arguments.ForName("if")
	if arg == nil || arg.Value == nil {
		return false, false
	}
	v := arg.Value
	if v.Kind == ast.Variable {
		if c.vars == nil && c.variables != nil {
			if json.Unmarshal(c.variables, &c.vars) != nil {
				return false, false
			}
		}
		if raw, found := c.vars[v.Raw]; found {
			switch string(raw) {
			case "true":
				return true, true
			case "false":
				return false, true
			}
			return false, false
		}
		def := c.op.VariableDefinitions.ForName(v.Raw)
		if def == nil || def.DefaultValue == nil {
			return false, false
		}
		v = def.DefaultValue
	}
	if v.Kind == ast.BooleanValue {
		return v.Raw == "true", true
	}
	return false, false
}
