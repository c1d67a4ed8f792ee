package gql_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/gql"
)

func TestAppendNormalized(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, query, opName, want string
	}{
		{"shorthand", "{ a }", "", "query{a}"},
		{"selected operation and used fragments sorted",
			"query Q { ...Z } mutation M($id: ID!, $l: [[Int!]]! = [[1], []]) @live { pay(id: $id) { ...B ... on Paid @x { at } ... { c } } } fragment Z on Q { z } fragment B on P { b ...A } fragment A on P { a }",
			"M", `mutation M($id:ID!,$l:[[Int!]]!=[[1],[]])@live{pay(id:$id){...B ...on Paid@x{at} ...{c}}} fragment A on P{a} fragment B on P{b ...A}`},
		{"whole document when nothing is selected", "mutation A { a } # c\n fragment F on T { f } query B { b }", "",
			"mutation A{a} query B{b} fragment F on T{f}"},
		{"values", `{ f(i: -1, f: 1.50e+3, s: "x\ty\u0001\"\\", b: true, n: null, e: RED, l: [1, "2"], o: {a: {b: $v}}) }`, "",
			`query{f(i:-1,f:1.50e+3,s:"x\ty\u0001\"\\",b:true,n:null,e:RED,l:[1,"2"],o:{a:{b:$v}})}`},
		{"descriptions dropped", `"doc" query Q { a }`, "", "query Q{a}"},
		{"fragment variables", "query { ...F } fragment F($a: Int = 1) on T { f(a: $a) }", "", "query{...F} fragment F($a:Int=1) on T{f(a:$a)}"},
		{"names that look like keywords", "{ on query fragment ... on on { true: mutation } }", "", "query{on query fragment ...on on{true:mutation}}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := gql.AppendNormalized(nil, tc.query, tc.opName)
			if err != nil || string(got) != tc.want {
				t.Fatalf("AppendNormalized(%q, %q) = %s, %v; want %s", tc.query, tc.opName, got, err, tc.want)
			}
			again, err := gql.AppendNormalized(nil, string(got), tc.opName)
			if err != nil || string(again) != string(got) {
				t.Errorf("AppendNormalized(%q) = %s, %v; want it unchanged", got, again, err)
			}
		})
	}
}

func TestAppendNormalizedErrors(t *testing.T) {
	t.Parallel()
	for _, q := range []string{"", "{", "query {}", "type T { a: Int }", "{ a(s: \"\xff\") }", "{ a(s: \"\n\") }"} {
		got, err := gql.AppendNormalized([]byte("dst"), q, "")
		if !errors.Is(err, gql.ErrSyntax) || string(got) != "dst" {
			t.Errorf("AppendNormalized(dst, %q) = %q, %v; want dst, ErrSyntax", q, got, err)
		}
	}
}

// TestHostileDocuments: documents built to be slow or deep are handled in
// linear time, and the parser's nesting limit turns deep ones into
// KindUnknown instead of exhausting the stack.
func TestHostileDocuments(t *testing.T) {
	t.Parallel()
	t.Run("long fragment chain", func(t *testing.T) {
		t.Parallel()
		const n = 20000
		var b strings.Builder
		b.WriteString("mutation { ...F0 }")
		for i := range n {
			fmt.Fprintf(&b, " fragment F%d on Mutation { f%d ...F%d }", i, i, (i+1)%n)
		}
		r, err := gql.ParseRequest("application/graphql", []byte(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		if op := r.Operation(); op.Kind != gql.KindMutation || len(op.Fields) != n {
			t.Errorf("Operation() = %v with %d fields; want mutation with %d", op.Kind, len(op.Fields), n)
		}
	})
	t.Run("deep nesting", func(t *testing.T) {
		t.Parallel()
		const depth = 100000
		q := "mutation " + strings.Repeat("{a", depth) + strings.Repeat("}", depth)
		r, err := gql.ParseRequest("application/graphql", []byte(q))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Operation().Kind; got != gql.KindUnknown {
			t.Errorf("Kind = %v; want unknown", got)
		}
		q = `{ a(v: ` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `) }`
		if _, err := gql.AppendNormalized(nil, q, ""); !errors.Is(err, gql.ErrSyntax) {
			t.Errorf("AppendNormalized(deep list) error = %v; want ErrSyntax", err)
		}
	})
}
