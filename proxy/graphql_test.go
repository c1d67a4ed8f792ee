package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	graphql "github.com/graph-gophers/graphql-go"
	"github.com/graph-gophers/graphql-go/relay"

	"github.com/idemgate/idemgate/keystore/memstore"
)

// A real GraphQL server (graph-gophers/graphql-go) behind idemgate.
const shopSchema = `
schema { query: Query mutation: Mutation }
type Query { orderCount: Int! }
type Mutation {
	createOrder(input: OrderInput!): Order
	failOrder(sku: String!): Order
}
input OrderInput { sku: String! qty: Int! }
type Order { id: ID! sku: String! qty: Int! }
`

type gqlShop struct {
	mu       sync.Mutex // protects orders, failures
	orders   int
	failures int
}

func (s *gqlShop) counts() (orders, failures int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.orders, s.failures
}

func (s *gqlShop) OrderCount() int32 { o, _ := s.counts(); return int32(o) }

func (s *gqlShop) CreateOrder(args struct {
	Input struct {
		Sku string
		Qty int32
	}
}) (*gqlOrder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.orders++
	return &gqlOrder{id: s.orders, sku: args.Input.Sku, qty: args.Input.Qty}, nil
}

func (s *gqlShop) FailOrder(struct{ Sku string }) (*gqlOrder, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures++
	return nil, errors.New("out of stock")
}

type gqlOrder struct {
	id  int
	sku string
	qty int32
}

func (o *gqlOrder) ID() graphql.ID { return graphql.ID(fmt.Sprint(o.id)) }
func (o *gqlOrder) Sku() string    { return o.sku }
func (o *gqlOrder) Qty() int32     { return o.qty }

func TestGraphQLRoute(t *testing.T) {
	t.Parallel()
	shop := &gqlShop{}
	up := httptest.NewServer(&relay.Handler{Schema: graphql.MustParseSchema(shopSchema, shop)})
	t.Cleanup(up.Close)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{{Name: "graphql", Method: "POST", Path: "/graphql", Idempotent: true, Protocol: ProtocolGraphQL}}
	})
	do := func(key, body string) result { return tp.do(t, "POST", "/graphql", key, body) }

	create := `{"query":"mutation Create($in: OrderInput!) { createOrder(input: $in) { id sku qty } }","operationName":"Create","variables":{"in":{"sku":"tea","qty":2}}}`
	first := do("k1", create)
	if first.status != 200 || !strings.Contains(string(first.body), `"id":"1"`) {
		t.Fatalf("first mutation = %v", first)
	}
	// Reformatted, with a comment and commas, variables in another order.
	same := `{"variables":{"in":{"qty":2,"sku":"tea"}},"operationName":"Create","query":"# retry\nmutation Create($in: OrderInput!) {\n  createOrder(input: $in) { id, sku, qty }\n}\n"}`
	again := do("k1", same)
	if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(first.body) {
		t.Errorf("reformatted retry = %v; want the replay of %v", again, first)
	}
	// A changed variable is another request: GraphQL-shaped 409.
	other := do("k1", strings.Replace(create, `"qty":2`, `"qty":3`, 1))
	if other.status != 409 || other.header.Get("Content-Type") != "application/json" || graphqlCode(t, other) != "idempotency_key_reused" {
		t.Errorf("changed variable = %v (%s); want a GraphQL-shaped 409 idempotency_key_reused", other, other.header.Get("Content-Type"))
	}
	if n, _ := shop.counts(); n != 1 {
		t.Errorf("orders = %d; want 1", n)
	}

	// A query with a key runs every time: queries ignore the key.
	for i := range 2 {
		q := do("k-query", `{"query":"{ orderCount }"}`)
		if q.status != 200 || q.header.Get("Idempotent-Replayed") != "" || !strings.Contains(string(q.body), "orderCount") {
			t.Errorf("query #%d = %v; want it run, not replayed", i, q)
		}
	}

	// A validation error: nothing ran, the key is released; the corrected
	// request runs under the same key.
	bad := do("k2", `{"query":"mutation { createOrder(input: {sku: \"tea\", qty: 1}) { nope } }"}`)
	if bad.status != 200 || !strings.Contains(string(bad.body), "errors") {
		t.Fatalf("invalid mutation = %v; want the upstream's validation error", bad)
	}
	fixed := do("k2", `{"query":"mutation { createOrder(input: {sku: \"tea\", qty: 1}) { id } }"}`)
	if fixed.header.Get("Idempotent-Replayed") != "" || !strings.Contains(string(fixed.body), `"id":"2"`) {
		t.Errorf("corrected request under the released key = %v; want it run (order 2)", fixed)
	}

	// One failing mutation: released, the retry runs again.
	for i := 1; i <= 2; i++ {
		r := do("k3", `{"query":"mutation { failOrder(sku: \"x\") { id } }"}`)
		if r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("failed single mutation #%d was replayed; want it released and run", i)
		}
		if _, f := shop.counts(); f != i {
			t.Errorf("failures after #%d = %d; want %d", i, f, i)
		}
	}

	// Two mutations, one failing: the other may have written, so the answer
	// is stored and replayed.
	two := `{"query":"mutation { a: createOrder(input: {sku: \"a\", qty: 1}) { id } b: failOrder(sku: \"b\") { id } }"}`
	r1 := do("k4", two)
	r2 := do("k4", two)
	if r2.header.Get("Idempotent-Replayed") != "true" || string(r2.body) != string(r1.body) {
		t.Errorf("two mutations, one failing: retry = %v; want the replay of %v", r2, r1)
	}
	if n, _ := shop.counts(); n != 3 {
		t.Errorf("orders = %d; want 3", n)
	}

	// idemgate's own answers are GraphQL-shaped: a bad key.
	inv := do("bad key", create)
	if inv.status != 400 || graphqlCode(t, inv) != "idempotency_key_invalid" {
		t.Errorf("invalid key = %v; want a GraphQL-shaped 400", inv)
	}
}

// graphqlCode returns errors[0].extensions.code of a GraphQL error answer.
func graphqlCode(t *testing.T, r result) string {
	t.Helper()
	var body struct {
		Errors []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &body); err != nil || len(body.Errors) != 1 || body.Errors[0].Message == "" {
		t.Errorf("not a GraphQL error answer: %s (%v)", r.body, err)
		return ""
	}
	return body.Errors[0].Extensions.Code
}
