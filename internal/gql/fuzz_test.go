package gql_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/gql"
)

var fuzzSeeds = []string{
	createOrder,
	"{ a }",
	"query A { a } mutation B { b } subscription C { c }",
	`mutation M($id: ID!, $l: [[Int!]]! = [[1], []]) @live { pay(id: $id, o: {a: [1, 2.5e3, "s", true, null, RED]}) { ...B ... on Paid @x { at } ... { c } } } fragment B on P { b ...B }`,
	"# comment\nmutation { a, b, c, }",
	`{ a(s: """  block
	  "string" \""" """, t: "\u00e9\u{1F600}\uD83D\uDE00\n\t\"\\\/") }`,
	`"described" query Q($a: Int = 1 @d) { ...F } fragment F($b: Int) on T { f(b: $b) }`,
	"{ on query fragment ... on on { true: mutation } }",
	"mutation { a(",
	"",
	"\xff",
}

// FuzzNormalize checks that normalization never panics, that what it prints
// parses and normalizes to itself, and that ParseRequest agrees with it.
func FuzzNormalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, "")
		f.Add(s, "A")
	}
	f.Fuzz(func(t *testing.T, query, opName string) {
		out, err := gql.AppendNormalized(nil, query, opName)
		if err != nil {
			if !errors.Is(err, gql.ErrSyntax) {
				t.Fatalf("AppendNormalized(%q, %q) error %v; want ErrSyntax", query, opName, err)
			}
			return
		}
		again, err := gql.AppendNormalized(nil, string(out), opName)
		if err != nil {
			t.Fatalf("AppendNormalized(%q, %q) = %q, which does not parse: %v", query, opName, out, err)
		}
		if !bytes.Equal(again, out) {
			t.Fatalf("not idempotent for %q, %q:\nonce:  %q\ntwice: %q", query, opName, out, again)
		}
		// The request built from either text has the same operation and
		// fingerprint.
		a, errA := gql.ParseRequest("application/graphql", []byte(query))
		b, errB := gql.ParseRequest("application/graphql", out)
		if errA != nil || errB != nil {
			return // blank documents
		}
		if opName == "" {
			if !bytes.Equal(a.Fingerprint(), b.Fingerprint()) {
				t.Fatalf("fingerprints of %q and its normalized form %q differ", query, out)
			}
			oa, ob := a.Operation(), b.Operation()
			if oa.Kind != ob.Kind || oa.Name != ob.Name || len(oa.Fields) != len(ob.Fields) {
				t.Fatalf("Operation() of %q = %+v; of its normalized form %+v", query, oa, ob)
			}
		}
	})
}

// FuzzParseRequest checks that ParseRequest never panics on a JSON body and
// that formatting the body differently (its canonical JSON form) changes
// neither the verdict nor the fingerprint.
func FuzzParseRequest(f *testing.F) {
	f.Add(typicalMutation)
	for _, s := range fuzzSeeds {
		f.Add([]byte(body(s, `"variables":{"b":[1,{"c":null}],"a":"\u00e9"}`, `"operationName":"A"`)))
	}
	for _, s := range []string{
		`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab\u0031"}}}`,
		`{"qu\u0065ry":"{a}","x":[1,2,{"y":"}"}],"extensions":{ }}`,
		`{"query":"{a}","Query":"{b}"}`,
		`{"query":"{a}","variables":[],"extensions":1}`,
		`[{"query":"{a}"}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		a, errA := gql.ParseRequest("application/json", in)
		canon, ok := canonjson.Append(nil, in, nil)
		if !ok {
			if errA == nil {
				t.Fatalf("ParseRequest(%q) accepted a body that canonjson refuses", in)
			}
			return
		}
		b, errB := gql.ParseRequest("application/json", canon)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("ParseRequest(%q) error %v; of its canonical form %q: %v", in, errA, canon, errB)
		}
		if errA != nil {
			return
		}
		if !bytes.Equal(a.Fingerprint(), b.Fingerprint()) {
			t.Fatalf("fingerprint of %q is %q; of its canonical form %q: %q", in, a.Fingerprint(), canon, b.Fingerprint())
		}
		if a.Query() != b.Query() || a.OperationName() != b.OperationName() || a.PersistedQueryHash() != b.PersistedQueryHash() {
			t.Fatalf("ParseRequest(%q) and its canonical form disagree", in)
		}
	})
}
