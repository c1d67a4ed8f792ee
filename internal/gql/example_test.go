package gql_test

import (
	"fmt"

	"github.com/idemgate/idemgate/internal/gql"
)

func ExampleParseRequest() {
	first := `{"query": "mutation Pay($id: ID!) {\n  pay(orderId: $id) { id status } # charge it\n}",
		"variables": {"id": "ord_1"}}`
	retry := `{"variables": {"id": "ord_1"}, "query": "mutation Pay($id: ID!) { pay(orderId: $id) { id, status } }"}`

	a, err := gql.ParseRequest("application/json", []byte(first))
	if err != nil {
		panic(err)
	}
	b, err := gql.ParseRequest("application/json", []byte(retry))
	if err != nil {
		panic(err)
	}
	op := a.Operation()
	fmt.Println(op.Kind, op.Name, op.Fields, a.Keyed())
	fmt.Println(string(a.Fingerprint()) == string(b.Fingerprint()))
	// Output:
	// mutation Pay [pay] true
	// true
}

func ExampleAppendNormalized() {
	doc := `
	# unused operations and fragments do not count
	query Me { me { id } }
	mutation Pay($id: ID!) {
	  pay(orderId: $id) { ...Result }
	}
	fragment Result on Payment { id, status }
	`
	out, err := gql.AppendNormalized(nil, doc, "Pay")
	fmt.Println(string(out), err)
	// Output:
	// mutation Pay($id:ID!){pay(orderId:$id){...Result}} fragment Result on Payment{id status} <nil>
}

func ExampleReleaseOnAnswer() {
	req, err := gql.ParseRequest("application/graphql", []byte(`mutation { pay(orderId: "ord_1") { id } }`))
	if err != nil {
		panic(err)
	}
	releaseStatuses := func(status int) bool { return status == 409 || status == 429 || status == 503 }
	for _, answer := range []string{
		`{"errors":[{"message":"Cannot query field \"payy\""}]}`,                 // rejected before execution
		`{"data":{"pay":null},"errors":[{"message":"declined","path":["pay"]}]}`, // the only mutation failed
		`{"data":null,"errors":[{"message":"internal","path":["pay"]}]}`,         // execution started
		`{"data":{"pay":{"id":"pay_1"}}}`,                                        // it ran
	} {
		fmt.Println(gql.ReleaseOnAnswer(req, 200, releaseStatuses, []byte(answer)))
	}
	// Output:
	// true
	// true
	// false
	// false
}

func ExampleErrorBody() {
	fmt.Println(string(gql.ErrorBody("A request with this Idempotency-Key is still running.", "idempotency_in_progress",
		map[string]any{"request_id": "01J0Y7"})))
	// Output:
	// {"errors":[{"message":"A request with this Idempotency-Key is still running.","extensions":{"code":"idempotency_in_progress","request_id":"01J0Y7"}}]}
}
