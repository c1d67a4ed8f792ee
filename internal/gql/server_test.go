package gql_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	graphql "github.com/graph-gophers/graphql-go"
	"github.com/graph-gophers/graphql-go/relay"

	"github.com/idemgate/idemgate/internal/gql"
)

// The tests below run the package against a real GraphQL server
// (graph-gophers/graphql-go behind its relay HTTP handler), so the answers
// that ReleaseOnAnswer reads are what a real server sends, not hand-rolled.

const shopSchema = `
schema { query: Query mutation: Mutation }
type Query { orderCount: Int! }
type Mutation {
	createOrder(input: OrderInput!): Order
	failOrder(sku: String!): Order
	failOrderStrict(sku: String!): Order!
}
input OrderInput { sku: String! qty: Int! }
type Order { id: ID! sku: String! qty: Int! }
`

// shop is the resolver: it records every order it creates.
type shop struct {
	mu     sync.Mutex // protects orders
	orders []order
}

type order struct {
	sku string
	qty int32
}

func (s *shop) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.orders)
}

func (s *shop) OrderCount() int32 { return int32(s.count()) }

type orderInput struct {
	Sku string
	Qty int32
}

func (s *shop) CreateOrder(args struct{ Input orderInput }) (*orderResolver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.orders = append(s.orders, order{args.Input.Sku, args.Input.Qty})
	return &orderResolver{id: len(s.orders), o: s.orders[len(s.orders)-1]}, nil
}

var errOutOfStock = errors.New("out of stock")

func (s *shop) FailOrder(struct{ Sku string }) (*orderResolver, error) { return nil, errOutOfStock }

func (s *shop) FailOrderStrict(struct{ Sku string }) (*orderResolver, error) {
	return nil, errOutOfStock
}

type orderResolver struct {
	id int
	o  order
}

func (r *orderResolver) ID() graphql.ID { return graphql.ID(fmt.Sprint(r.id)) }
func (r *orderResolver) Sku() string    { return r.o.sku }
func (r *orderResolver) Qty() int32     { return r.o.qty }

// newShopServer starts a GraphQL server over HTTP for one test.
func newShopServer(t *testing.T) (*httptest.Server, *shop) {
	t.Helper()
	s := &shop{}
	schema := graphql.MustParseSchema(shopSchema, s)
	srv := httptest.NewServer(&relay.Handler{Schema: schema})
	t.Cleanup(srv.Close)
	return srv, s
}

// post sends one GraphQL request and returns the answer's status and body.
func post(t *testing.T, url, reqBody string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(reqBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", jsonCT)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", reqBody, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer to %s: %v", reqBody, err)
	}
	return resp.StatusCode, b
}

func TestAgainstGraphQLServer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		kind    gql.Kind
		keyed   bool
		release bool
		orders  int // orders the server holds afterwards
	}{
		{"mutation succeeds: kept", body(`mutation Create($in: OrderInput!) { createOrder(input: $in) { id sku qty } }`,
			`"variables":{"in":{"sku":"A-1","qty":2}}`), gql.KindMutation, true, false, 1},
		{"validation error has no data: released", body(`mutation { createOrder(input: {sku: "A-1"}) { id } }`),
			gql.KindMutation, true, true, 0},
		{"unknown field has no data: released", body(`mutation { createOrderz(input: {sku: "A-1", qty: 1}) { id } }`),
			gql.KindMutation, true, true, 0},
		{"variable of the wrong type has no data: released", body(`mutation Create($in: OrderInput!) { createOrder(input: $in) { id } }`,
			`"variables":{"in":{"sku":"A-1","qty":"two"}}`), gql.KindMutation, true, true, 0},
		{"syntax error: unknown kind, keyed, released", body(`mutation { createOrder(input: {sku: "A-1", qty: 1} { id } }`),
			gql.KindUnknown, true, true, 0},
		{"operationName selects nothing: released", body(`mutation A { createOrder(input: {sku: "A-1", qty: 1}) { id } }`,
			`"operationName":"B"`), gql.KindUnknown, true, true, 0},
		{"single failing mutation: released", body(`mutation { failOrder(sku: "A-1") { id } }`),
			gql.KindMutation, true, true, 0},
		{"single failing aliased mutation: released", body(`mutation { f: failOrder(sku: "A-1") { id } __typename }`),
			gql.KindMutation, true, true, 0},
		{"non-null mutation failing makes data null: kept", body(`mutation { failOrderStrict(sku: "A-1") { id } }`),
			gql.KindMutation, true, false, 0},
		{"two mutations, one failing: kept", body(`mutation {
			ok: createOrder(input: {sku: "A-1", qty: 1}) { id }
			ko: failOrder(sku: "B-2") { id } }`), gql.KindMutation, true, false, 1},
		{"two mutations succeed: kept", body(`mutation {
			a: createOrder(input: {sku: "A-1", qty: 1}) { id }
			b: createOrder(input: {sku: "B-2", qty: 1}) { id } }`), gql.KindMutation, true, false, 2},
		{"query: not keyed", body(`query { orderCount }`), gql.KindQuery, false, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv, s := newShopServer(t)
			req, err := gql.ParseRequest(jsonCT, []byte(tc.body))
			if err != nil {
				t.Fatalf("ParseRequest(%s): %v", tc.body, err)
			}
			if got := req.Operation().Kind; got != tc.kind {
				t.Errorf("Kind = %v; want %v", got, tc.kind)
			}
			if got := req.Keyed(); got != tc.keyed {
				t.Errorf("Keyed() = %v; want %v", got, tc.keyed)
			}
			status, answer := post(t, srv.URL, tc.body)
			t.Logf("answer: %d %s", status, answer)
			if got := gql.ReleaseOnAnswer(req, status, defaultRelease, answer); got != tc.release {
				t.Errorf("ReleaseOnAnswer(%d %s) = %v; want %v", status, answer, got, tc.release)
			}
			if got := s.count(); got != tc.orders {
				t.Errorf("the server holds %d orders; want %d (answer %s)", got, tc.orders, answer)
			}
		})
	}
}

// TestAgainstGraphQLServerSameRequest: the server runs a reformatted,
// commented request with reordered variables exactly as the original, and
// both have one fingerprint; a changed variable does not.
func TestAgainstGraphQLServerSameRequest(t *testing.T) {
	t.Parallel()
	srv, s := newShopServer(t)
	first := body(`mutation Create($in: OrderInput!, $sku: String!) { createOrder(input: $in) { sku qty } f: failOrder(sku: $sku) { id } }`,
		`"variables":{"in":{"sku":"A-1","qty":2},"sku":"X"}`)
	retry := body("# retried by the client\nmutation Create(\n  $in: OrderInput!\n  $sku: String!\n) {\n  createOrder(input: $in) {\n    sku,\n    qty\n  }\n  f: failOrder(sku: $sku) { id }\n}",
		`"variables":{"sku":"X","in":{"qty":2,"sku":"A-1"}}`)
	changed := body(`mutation Create($in: OrderInput!, $sku: String!) { createOrder(input: $in) { sku qty } f: failOrder(sku: $sku) { id } }`,
		`"variables":{"in":{"sku":"A-1","qty":3},"sku":"X"}`)
	fp := func(b string) []byte { return mustParse(t, jsonCT, b).Fingerprint() }
	if !bytes.Equal(fp(first), fp(retry)) {
		t.Errorf("the retry's fingerprint differs from the first request's")
	}
	if bytes.Equal(fp(first), fp(changed)) {
		t.Errorf("a changed variable gives the same fingerprint")
	}
	_, a := post(t, srv.URL, first)
	_, b := post(t, srv.URL, retry)
	if !bytes.Equal(a, b) {
		t.Errorf("the server answered the retry %s; want the same as the first request %s", b, a)
	}
	if got := s.count(); got != 2 {
		t.Errorf("the server holds %d orders; want 2 (it ran both)", got)
	}
}
