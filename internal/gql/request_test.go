package gql_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gql"
)

const jsonCT = "application/json"

// mustParse parses a JSON request body or fails the test.
func mustParse(t testing.TB, contentType, body string) gql.Request {
	t.Helper()
	r, err := gql.ParseRequest(contentType, []byte(body))
	if err != nil {
		t.Fatalf("ParseRequest(%q, %s) error: %v", contentType, body, err)
	}
	return r
}

const createOrder = `mutation CreateOrder($input: OrderInput!, $dry: Boolean = false) {
  createOrder(input: $input, dryRun: $dry) {
    id
    total
    ...Lines
  }
}
fragment Lines on Order { lines { sku qty } }`

// body builds a JSON request body from raw JSON member values.
func body(query string, members ...string) string {
	var b strings.Builder
	b.WriteString(`{"query":`)
	b.WriteString(quoteJSON(query))
	for _, m := range members {
		b.WriteByte(',')
		b.WriteString(m)
	}
	b.WriteByte('}')
	return b.String()
}

func quoteJSON(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

type reqCase struct {
	ct, body string
}

func (c reqCase) contentType() string {
	if c.ct == "" {
		return jsonCT
	}
	return c.ct
}

func TestFingerprintEqual(t *testing.T) {
	t.Parallel()
	vars := `"variables":{"input":{"sku":"A-1","qty":2,"note":"caf\u00e9"},"dry":false}`
	base := reqCase{body: body(createOrder, vars)}
	tests := []struct {
		name string
		a, b reqCase
	}{
		{"reformatted", base, reqCase{body: body(`mutation   CreateOrder(  $input : OrderInput! $dry:Boolean=false){createOrder(input:$input dryRun:$dry){id total ...Lines}}
			fragment Lines on Order{lines{sku
			qty}}`, vars)}},
		{"comments", base, reqCase{body: body("# create it\n"+strings.ReplaceAll(createOrder, "total", "total # the sum\n"), vars)}},
		{"insignificant commas", base, reqCase{body: body(`mutation CreateOrder($input: OrderInput!,, $dry: Boolean = false,) {
			createOrder(input: $input, dryRun: $dry,) { id, total, ...Lines, } }
			fragment Lines on Order { lines { sku, qty, } },`, vars)}},
		{"variable order", base, reqCase{body: body(createOrder, `"variables":{"dry":false,"input":{"note":"café","qty":2,"sku":"A-1"}}`)}},
		{"member order and JSON formatting", base, reqCase{body: "{\n  " + vars + ",\n  \"query\": " + quoteJSON(createOrder) + "\n}"}},
		{"operationName given for the only operation", reqCase{body: body(createOrder, vars, `"operationName":"CreateOrder"`)},
			reqCase{body: body(createOrder+"\nquery Other { me { id } }", vars, `"operationName":"CreateOrder"`)}},
		{"unused fragment and fragment order", base, reqCase{body: body(`fragment Unused on Order { id }
			fragment Lines on Order { lines { sku qty } }
			mutation CreateOrder($input: OrderInput!, $dry: Boolean = false) { createOrder(input: $input, dryRun: $dry) { id total ...Lines } }`, vars)}},
		{"alias equal to name", base, reqCase{body: body(strings.Replace(createOrder, "createOrder(", "createOrder: createOrder(", 1), vars)}},
		{"null, absent and empty variables",
			reqCase{body: body(`mutation { ping }`, `"variables":null`)},
			reqCase{body: body(`mutation { ping }`, `"variables":{}`, `"operationName":null`)}},
		{"escaped member names and empty objects with spaces",
			reqCase{body: `{"qu\u0065ry":"mutation { ping }","variables":{ },"extensions":{ }}`},
			reqCase{body: body(`mutation { ping }`)}},
		{"absent and null variables", reqCase{body: body(`mutation { ping }`)}, reqCase{body: body(`mutation { ping }`, `"variables":null`, `"extensions":{}`)}},
		{"block string and string", reqCase{body: body(`mutation { note(text: """
			  two
			    lines "quoted"
			""") }`)}, reqCase{body: body(`mutation { note(text: "two\n  lines \"quoted\"") }`)}},
		{"string escapes", reqCase{body: body(`mutation { note(text: "caf\u00e9 \/ \u{1F600} \uD83D\uDE00") }`)}, reqCase{body: body(`mutation { note(text: "café / 😀 😀") }`)}},
		{"query shorthand", reqCase{body: body(`{ me { id } }`)}, reqCase{body: body(`query { me { id } }`)}},
		{"application/graphql", reqCase{ct: "application/graphql", body: "mutation { ping }"}, reqCase{body: body(`mutation{ping}`)}},
		{"content type parameters", reqCase{ct: "application/json; charset=utf-8", body: body(`mutation { ping }`)}, reqCase{ct: "", body: body(`mutation { ping }`)}},
		{"persisted query JSON formatting",
			reqCase{body: `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab12"}},"variables":{"a":1,"b":2}}`},
			reqCase{body: `{"variables":{"b":2,"a":1},"extensions":{"persistedQuery":{"sha256Hash":"ab12","version":1}}}`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := mustParse(t, tc.a.contentType(), tc.a.body)
			b := mustParse(t, tc.b.contentType(), tc.b.body)
			if fa, fb := a.Fingerprint(), b.Fingerprint(); !bytes.Equal(fa, fb) {
				t.Errorf("fingerprints differ:\n got %q\nwant %q", fb, fa)
			}
		})
	}
}

func TestFingerprintDiffer(t *testing.T) {
	t.Parallel()
	vars := `"variables":{"input":{"sku":"A-1","qty":2},"dry":false}`
	base := reqCase{body: body(createOrder, vars)}
	twoOps := "mutation A { a } mutation B { a }"
	tests := []struct {
		name string
		a, b reqCase
	}{
		{"changed variable", base, reqCase{body: body(createOrder, `"variables":{"input":{"sku":"A-1","qty":3},"dry":false}`)}},
		{"number as written", base, reqCase{body: body(createOrder, `"variables":{"input":{"sku":"A-1","qty":2.0},"dry":false}`)}},
		{"added variable", base, reqCase{body: body(createOrder, `"variables":{"input":{"sku":"A-1","qty":2},"dry":false,"x":null}`)}},
		{"operationName", reqCase{body: body(twoOps, `"operationName":"A"`)}, reqCase{body: body(twoOps, `"operationName":"B"`)}},
		{"renamed operation", base, reqCase{body: body(strings.Replace(createOrder, "CreateOrder", "PlaceOrder", 1), vars)}},
		{"field order", base, reqCase{body: body(strings.Replace(createOrder, "id\n    total", "total\n    id", 1), vars)}},
		{"argument order", base, reqCase{body: body(strings.Replace(createOrder, "input: $input, dryRun: $dry", "dryRun: $dry, input: $input", 1), vars)}},
		{"input object field order", reqCase{body: body(`mutation { m(o: {a: 1, b: 2}) }`)}, reqCase{body: body(`mutation { m(o: {b: 2, a: 1}) }`)}},
		{"added field", base, reqCase{body: body(strings.Replace(createOrder, "total", "total currency", 1), vars)}},
		{"alias", reqCase{body: body(`mutation { a: ping }`)}, reqCase{body: body(`mutation { b: ping }`)}},
		{"directive", reqCase{body: body(`mutation { ping }`)}, reqCase{body: body(`mutation { ping @include(if: true) }`)}},
		{"variable directive", reqCase{body: body(`mutation($a: Int) { ping(a: $a) }`)}, reqCase{body: body(`mutation($a: Int @d) { ping(a: $a) }`)}},
		{"default value", base, reqCase{body: body(strings.Replace(createOrder, "= false", "= true", 1), vars)}},
		{"used fragment changed", base, reqCase{body: body(strings.Replace(createOrder, "sku qty", "qty sku", 1), vars)}},
		{"string value", reqCase{body: body(`mutation { note(text: "a") }`)}, reqCase{body: body(`mutation { note(text: "a ") }`)}},
		{"mutation and query", reqCase{body: body(`mutation { ping }`)}, reqCase{body: body(`query { ping }`)}},
		{"persisted hash", reqCase{body: `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab12"}}}`},
			reqCase{body: `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab13"}}}`}},
		{"persisted hash with and without query",
			reqCase{body: `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab12"}}}`},
			reqCase{body: body(`mutation { ping }`, `"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab12"}}`)}},
		{"other extensions", reqCase{body: body(`mutation { ping }`, `"extensions":{"tenant":"a"}`)}, reqCase{body: body(`mutation { ping }`, `"extensions":{"tenant":"b"}`)}},
		{"non-standard member", reqCase{body: `{"query":"mutation { ping }","doc_id":"1"}`}, reqCase{body: `{"query":"mutation { ping }","doc_id":"2"}`}},
		{"unparsable documents differ by formatting", reqCase{body: body(`mutation { ping `)}, reqCase{body: body(`mutation {ping `)}},
		{"unparsable and parsable", reqCase{body: body(`mutation{ping}}`)}, reqCase{body: body(`mutation{ping}`)}},
		{"unselected document and selected operation",
			reqCase{body: body(`mutation A { ping }`, `"operationName":"B"`)}, reqCase{body: body(`mutation A { ping }`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := mustParse(t, tc.a.contentType(), tc.a.body)
			b := mustParse(t, tc.b.contentType(), tc.b.body)
			if fa, fb := a.Fingerprint(), b.Fingerprint(); bytes.Equal(fa, fb) {
				t.Errorf("fingerprints equal; want different: %q", fa)
			}
		})
	}
}

func TestOperation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ct     string
		body   string
		kind   gql.Kind
		opName string
		fields []string
		keyed  bool
	}{
		{"query shorthand", "", body(`{ me { id } }`), gql.KindQuery, "", nil, false},
		{"named query", "", body(`query Me { me { id } }`), gql.KindQuery, "Me", nil, false},
		{"mutation", "", body(createOrder), gql.KindMutation, "CreateOrder", []string{"createOrder"}, true},
		{"subscription", "", body(`subscription OnOrder { orderPlaced { id } }`), gql.KindSubscription, "OnOrder", nil, false},
		{"application/graphql mutation", "application/graphql", `mutation Pay { pay(id: 1) { ok } }`, gql.KindMutation, "Pay", []string{"pay"}, true},
		{"application/graphql query", "application/graphql; charset=utf-8", `{ me { id } }`, gql.KindQuery, "", nil, false},
		{"operationName selects the query", "", body(`mutation A { a } query B { b }`, `"operationName":"B"`), gql.KindQuery, "B", nil, false},
		{"operationName selects the mutation", "", body(`mutation A { a } query B { b }`, `"operationName":"A"`), gql.KindMutation, "A", []string{"a"}, true},
		{"operationName missing with several operations", "", body(`mutation A { a } query B { b }`), gql.KindUnknown, "", nil, true},
		{"operationName null with several operations", "", body(`mutation A { a } query B { b }`, `"operationName":null`), gql.KindUnknown, "", nil, true},
		{"unknown operationName", "", body(`mutation A { a }`, `"operationName":"C"`), gql.KindUnknown, "", nil, true},
		{"operationName on an anonymous operation", "", body(`mutation { a }`, `"operationName":"A"`), gql.KindUnknown, "", nil, true},
		{"duplicate operation names", "", body(`mutation A { a } query A { b }`, `"operationName":"A"`), gql.KindUnknown, "", nil, true},
		{"no operation", "", body(`fragment F on Query { a }`), gql.KindUnknown, "", nil, true},
		{"syntax error", "", body(`mutation { a(`), gql.KindUnknown, "", nil, true},
		{"not an executable document", "", body(`type Query { a: Int }`), gql.KindUnknown, "", nil, true},
		{"persisted query by hash only", "", `{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab12"}}}`, gql.KindUnknown, "", nil, true},
		{"persisted query with its document", "", body(`query Q { a }`, `"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab12"}}`), gql.KindQuery, "Q", nil, false},
		{"aliases and merged keys", "", body(`mutation { a: pay(id: 1) { ok } b: pay(id: 2) { ok } a: pay(id: 1) { ok } }`), gql.KindMutation, "", []string{"a", "b"}, true},
		{"__typename left out", "", body(`mutation { __typename pay { ok } t: __typename }`), gql.KindMutation, "", []string{"pay"}, true},
		{"fragments at the top level", "", body(`mutation { ...F ... on Mutation { c } ... @include(if: true) { d } ...F }
			fragment F on Mutation { a b ...G } fragment G on Mutation { e ...F }`), gql.KindMutation, "", []string{"a", "b", "e", "c", "d"}, true},
		{"skip and include literals", "", body(`mutation { a @skip(if: true) b @skip(if: false) c @include(if: false) d @include(if: true) ...F @skip(if: true) }
			fragment F on Mutation { e }`), gql.KindMutation, "", []string{"b", "d"}, true},
		{"skip and include variables", "", body(`mutation($s: Boolean!, $i: Boolean!, $d: Boolean = true, $n: Boolean) {
			a @skip(if: $s) b @include(if: $i) c @skip(if: $d) e @skip(if: $n) f @skip(if: $undefined) }`, `"variables":{"s":true,"i":false,"n":null}`),
			gql.KindMutation, "", []string{"e", "f"}, true},
		{"skip variable given overrides default", "", body(`mutation($d: Boolean = true) { a @skip(if: $d) }`, `"variables":{"d":false}`),
			gql.KindMutation, "", []string{"a"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ct := tc.ct
			if ct == "" {
				ct = jsonCT
			}
			r := mustParse(t, ct, tc.body)
			op := r.Operation()
			if op.Kind != tc.kind || op.Name != tc.opName || !slices.Equal(op.Fields, tc.fields) {
				t.Errorf("Operation() = %v %q %q; want %v %q %q", op.Kind, op.Name, op.Fields, tc.kind, tc.opName, tc.fields)
			}
			if got := r.Keyed(); got != tc.keyed {
				t.Errorf("Keyed() = %v; want %v", got, tc.keyed)
			}
		})
	}
}

func TestRequestAccessors(t *testing.T) {
	t.Parallel()
	r := mustParse(t, jsonCT, `{"query":"mutation A { a }","operationName":"A","variables":{"b":1, "a":[1, 2]},
		"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38"}}}`)
	if got, want := r.Query(), "mutation A { a }"; got != want {
		t.Errorf("Query() = %q; want %q", got, want)
	}
	if got, want := r.OperationName(), "A"; got != want {
		t.Errorf("OperationName() = %q; want %q", got, want)
	}
	if got, want := string(r.Variables()), `{"a":[1,2],"b":1}`; got != want {
		t.Errorf("Variables() = %s; want %s", got, want)
	}
	if got, want := r.PersistedQueryHash(), "ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38"; got != want {
		t.Errorf("PersistedQueryHash() = %q; want %q", got, want)
	}
	if got := string(mustParse(t, jsonCT, `{"query":"{a}","variables":{}}`).Variables()); got != "" {
		t.Errorf("Variables() of {} = %q; want empty", got)
	}
	// The zero Request has a fingerprint and is keyed.
	var zero gql.Request
	if !zero.Keyed() || len(zero.Fingerprint()) == 0 || zero.Operation().Kind != gql.KindUnknown {
		t.Errorf("zero Request: Keyed %v, Fingerprint %q, Kind %v; want true, non-empty, unknown", zero.Keyed(), zero.Fingerprint(), zero.Operation().Kind)
	}
	// AppendFingerprint appends.
	fp := r.AppendFingerprint([]byte("prefix"))
	if !bytes.HasPrefix(fp, []byte("prefix")) || !bytes.Equal(fp[len("prefix"):], r.Fingerprint()) {
		t.Errorf("AppendFingerprint(prefix) = %q; want prefix + %q", fp, r.Fingerprint())
	}
}

func TestParseRequestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ct   string
		body string
		want error
	}{
		{"text/plain", "text/plain", `{"query":"{a}"}`, gql.ErrUnsupportedMediaType},
		{"multipart upload", "multipart/form-data; boundary=x", "--x--", gql.ErrUnsupportedMediaType},
		{"bad content type", "application/", `{"query":"{a}"}`, gql.ErrUnsupportedMediaType},
		{"empty JSON body", jsonCT, "", gql.ErrInvalidRequest},
		{"invalid JSON", jsonCT, `{"query":"{a}"`, gql.ErrInvalidRequest},
		{"trailing data", jsonCT, `{"query":"{a}"} {}`, gql.ErrInvalidRequest},
		{"batch array", jsonCT, `[{"query":"{a}"}]`, gql.ErrInvalidRequest},
		{"string", jsonCT, `"{a}"`, gql.ErrInvalidRequest},
		{"null", jsonCT, `null`, gql.ErrInvalidRequest},
		{"no query", jsonCT, `{"variables":{}}`, gql.ErrInvalidRequest},
		{"empty query", jsonCT, `{"query":""}`, gql.ErrInvalidRequest},
		{"null query", jsonCT, `{"query":null}`, gql.ErrInvalidRequest},
		{"query not a string", jsonCT, `{"query":1}`, gql.ErrInvalidRequest},
		{"operationName not a string", jsonCT, `{"query":"{a}","operationName":["A"]}`, gql.ErrInvalidRequest},
		{"variables not an object", jsonCT, `{"query":"{a}","variables":"{\"a\":1}"}`, gql.ErrInvalidRequest},
		{"variables array", jsonCT, `{"query":"{a}","variables":[1]}`, gql.ErrInvalidRequest},
		{"extensions not an object", jsonCT, `{"query":"{a}","extensions":1}`, gql.ErrInvalidRequest},
		{"persistedQuery not an object", jsonCT, `{"query":"{a}","extensions":{"persistedQuery":"x"}}`, gql.ErrInvalidRequest},
		{"sha256Hash not a string", jsonCT, `{"extensions":{"persistedQuery":{"sha256Hash":1}}}`, gql.ErrInvalidRequest},
		{"duplicate member", jsonCT, `{"query":"mutation { a }","query":"mutation { b }"}`, gql.ErrInvalidRequest},
		{"duplicate variable", jsonCT, `{"query":"mutation { a }","variables":{"x":1,"x":2}}`, gql.ErrInvalidRequest},
		{"member differing in case", jsonCT, `{"query":"mutation { a }","Query":"mutation { b }"}`, gql.ErrInvalidRequest},
		{"variables differing in case", jsonCT, `{"query":"mutation { a }","VARIABLES":{}}`, gql.ErrInvalidRequest},
		{"invalid UTF-8", jsonCT, "{\"query\":\"mutation { a(s: \\\"\xff\\\") }\"}", gql.ErrInvalidRequest},
		{"empty application/graphql", "application/graphql", " \n", gql.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := gql.ParseRequest(tc.ct, []byte(tc.body))
			if !errors.Is(err, tc.want) {
				t.Errorf("ParseRequest(%q, %q) error = %v; want %v", tc.ct, tc.body, err, tc.want)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[gql.Kind]string{gql.KindUnknown: "unknown", gql.KindQuery: "query", gql.KindMutation: "mutation", gql.KindSubscription: "subscription", 99: "unknown"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q; want %q", k, got, want)
		}
	}
}
