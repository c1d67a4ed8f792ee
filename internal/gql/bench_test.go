package gql_test

import (
	"testing"

	"github.com/idemgate/idemgate/internal/gql"
)

// typicalMutation is a realistic keyed GraphQL write (~700 bytes): a named
// mutation with variables, a fragment, and an Apollo persisted-query hash.
var typicalMutation = []byte(`{
  "operationName": "CreateOrder",
  "query": "mutation CreateOrder($input: CreateOrderInput!, $notify: Boolean = true) {\n  createOrder(input: $input, notify: $notify) {\n    order {\n      id\n      number\n      status\n      ...OrderTotals\n    }\n    userErrors { field message }\n  }\n}\n\nfragment OrderTotals on Order {\n  total { amount currency }\n  lines { sku quantity unitPrice { amount currency } }\n}\n",
  "variables": {
    "input": {
      "externalRef": "shop-7731-0042",
      "client": {"id": "cl_01HZX3Q4V7", "email": "zoe.mueller@example.com"},
      "lines": [
        {"sku": "SKU-1001", "quantity": 2, "unitPrice": "24.90"},
        {"sku": "SKU-2002", "quantity": 1, "unitPrice": "39.00"}
      ],
      "note": "Leave at the reception\nRing twice."
    },
    "notify": false
  },
  "extensions": {"persistedQuery": {"version": 1, "sha256Hash": "ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38"}}
}`)

func BenchmarkParseRequestFingerprint(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(typicalMutation)))
	b.RunParallel(func(pb *testing.PB) {
		var buf []byte
		for pb.Next() {
			r, err := gql.ParseRequest("application/json", typicalMutation)
			if err != nil || r.Operation().Kind != gql.KindMutation {
				b.Fatalf("ParseRequest: %v, %v", err, r.Operation().Kind)
			}
			buf = r.AppendFingerprint(buf[:0])
		}
	})
}

func BenchmarkReleaseOnAnswer(b *testing.B) {
	r, err := gql.ParseRequest("application/json", typicalMutation)
	if err != nil {
		b.Fatal(err)
	}
	answer := []byte(`{"errors":[{"message":"client not found","path":["createOrder"],"extensions":{"code":"NOT_FOUND"}}],"data":{"createOrder":null}}`)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !gql.ReleaseOnAnswer(r, 200, nil, answer) {
				b.Fatal("ReleaseOnAnswer = false; want true")
			}
		}
	})
}
