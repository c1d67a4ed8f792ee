package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/gql"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	ptr, err := canonjson.ParsePointer("/meta/sent_at")
	if err != nil {
		t.Fatal(err)
	}
	base := fingerprint("POST", "/carts/a", "x=1", "application/json", []byte(`{"a":1,"b":[1,2]}`), nil)
	tests := []struct {
		name            string
		method, path, q string
		ct, body        string
		ignore          []canonjson.Pointer
		same            bool
	}{
		{"identical", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, true},
		{"key order and space", "POST", "/carts/a", "x=1", "application/json", "{ \"b\": [1, 2],\n\"a\": 1}", nil, true},
		{"+json type", "POST", "/carts/a", "x=1", "application/vnd.api+json", `{"b":[1,2],"a":1}`, nil, true},
		{"escapes", "POST", "/carts/a", "x=1", "application/json", `{"\u0061":1,"b":[1,2]}`, nil, true},
		{"unreserved encoded", "POST", "/c%61rts/%61", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, true},
		{"dot segments", "POST", "/x/../carts/./a", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, true},
		{"array order", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[2,1]}`, nil, false},
		{"number literal", "POST", "/carts/a", "x=1", "application/json", `{"a":1.0,"b":[1,2]}`, nil, false},
		{"ignored member", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2],"meta":{"sent_at":"now"}}`, []canonjson.Pointer{ptr}, false},
		{"method", "PUT", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"path case", "POST", "/carts/A", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"trailing slash", "POST", "/carts/a/", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"matrix parameter", "POST", "/carts/a;v=1", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"query", "POST", "/carts/a", "x=2", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"text is raw", "POST", "/carts/a", "x=1", "text/plain", `{"b":[1,2],"a":1}`, nil, false},
		{"text equal to the canonical form", "POST", "/carts/a", "x=1", "text/plain", `{"a":1,"b":[1,2]}`, nil, false},
		{"invalid json is raw", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]`, nil, false},
		{"field boundary", "POST", "/carts/ax=1", "", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := fingerprint(tc.method, tc.path, tc.q, tc.ct, []byte(tc.body), tc.ignore)
			if (got == base) != tc.same {
				t.Errorf("same fingerprint = %v; want %v", got == base, tc.same)
			}
		})
	}
	a := fingerprint("POST", "/p", "", "application/json", []byte(`{"a":1,"meta":{"sent_at":"1"}}`), []canonjson.Pointer{ptr})
	b := fingerprint("POST", "/p", "", "application/json", []byte(`{"meta":{"sent_at":"2"},"a":1}`), []canonjson.Pointer{ptr})
	if a != b {
		t.Errorf("bodies differing in an ignored member have different fingerprints")
	}
	if fingerprintV1("r", "POST", "/carts/a", "x=1", "application/json", []byte(`{"a":1,"b":[1,2]}`), nil) == base {
		t.Errorf("fingerprintV1 equals the current fingerprint")
	}
}

// Fixtures of the first release (commit 768a101), computed with its own
// proxy.Fingerprint and proxy.ScopeKey: the upgrade test replays records
// written with them.
var v1Fixtures = struct {
	gzipBody                                               string
	json, jsonQuery, text, gzip, graphql, scope, scopeShop string
}{
	gzipBody:  "1f8b08000081e66a00ffaa56ca2c49cd2d56b28a36d4318ad551cacb2f4955b2524aaf52aa05040000ffffd5cdf7731b000000",
	json:      "f974ff526b8488c8bc538928f529afa7ea122a6e6ec26c8e2fdd546b3e6550b9",
	jsonQuery: "ca2745a5ca2f4ef4e720edfa3fc444f793673a58ec6596d26a68d2be808afc8d",
	text:      "4ee41eb3998f8c7ba048d6c310b5f13f67e249084b4bae8977cf8cfdb55762e8",
	gzip:      "c7a90eb60fd1101b15043134b5bfba4434d9435e91e636fd78f038a1cae533b9",
	graphql:   "e315a26d89610710c4ea91229b873c2e1b13f87425601807bce463cf81888456",
	scope:     "73ad5bfe016d2ef5126e5a56bd47ab1557def40e1119e94a1cb3067871c7a811",
	scopeShop: "7559c6b6751feaf82cdda73ea54dc23823a130a1100c080e0ee3bfac81ba27cd",
}

const v1GraphQLBody = `{"query":"mutation M($i: In!) { add(input: $i) { id } }","variables":{"i":{"n":1}},"extensions":{"tracing":{"t":1}}}`

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFingerprintV1Fixtures: fingerprintV1 is the first release's
// fingerprint byte for byte, and store keys have not changed.
func TestFingerprintV1Fixtures(t *testing.T) {
	t.Parallel()
	ptr, _ := canonjson.ParsePointer("/meta/sent_at")
	req, err := gql.ParseRequest("application/json", []byte(v1GraphQLBody))
	if err != nil {
		t.Fatal(err)
	}
	f := v1Fixtures
	for _, tc := range []struct {
		name string
		got  keystore.Fingerprint
		want string
	}{
		{"json", fingerprintV1("create_cart", "POST", "/ucp/v1/carts", "", "application/json", []byte(`{"b":2,"a":1,"meta":{"sent_at":"x"}}`), []canonjson.Pointer{ptr}), f.json},
		{"json with query", fingerprintV1("update_cart", "PUT", "/ucp/v1/carts/C1", "v=2", "application/json", []byte(`{"a":1}`), nil), f.jsonQuery},
		{"text", fingerprintV1("create_cart", "POST", "/ucp/v1/carts", "", "text/plain", []byte(`hello`), nil), f.text},
		{"gzip", fingerprintV1("create_cart", "POST", "/ucp/v1/carts", "", "application/json", mustHex(t, f.gzipBody), nil), f.gzip},
		{"graphql", fingerprintV1("gql", "POST", "/graphql", "", "", graphqlFingerprintBody(&req), nil), f.graphql},
	} {
		if tc.got.String() != tc.want {
			t.Errorf("%s: fingerprintV1 = %s; want the first release's %s", tc.name, tc.got, tc.want)
		}
	}
	p, err := newOpts(Options{Upstream: &url.URL{Scheme: "http", Host: "upstream.invalid"}, Idempotency: Idempotency{IdentityHeaders: []string{"Authorization"}}})
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Authorization": {"Bearer a"}}
	if k := scopeKey(p, "", h, "k-json"); k.String() != f.scope {
		t.Errorf("ScopeKey = %s; want the first release's %s", k, f.scope)
	}
	if k := scopeKey(p, "shop", h, "k-json"); k.String() != f.scopeShop {
		t.Errorf("ScopeKey with a tenant = %s; want the first release's %s", k, f.scopeShop)
	}
}

var upgradeRoutes = []Route{
	{Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true, FingerprintIgnore: []string{"/meta/sent_at"}},
	{Name: "update_cart", Method: "PUT", Path: "/ucp/v1/carts/{id}", Idempotent: true},
	{Name: "gql", Method: "POST", Path: "/graphql", Idempotent: true, Protocol: ProtocolGraphQL},
}

// TestUpgradeReplaysV1Records: records the first release wrote (their
// fingerprints and store keys are the fixtures) replay under this one: a
// retry that spans the upgrade neither runs again nor gets key_reused.
func TestUpgradeReplaysV1Records(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = upgradeRoutes })
	f := v1Fixtures
	ctx := context.Background()
	auth := http.Header{"Authorization": {"Bearer a"}}
	for _, tc := range []struct {
		name, method, path, key, ct, enc, body, fp, route string
	}{
		{"json", "POST", "/ucp/v1/carts", "k-json", "application/json", "", `{"b":2,"a":1,"meta":{"sent_at":"x"}}`, f.json, "create_cart"},
		{"json with query", "PUT", "/ucp/v1/carts/C1?v=2", "k-jsonq", "application/json", "", `{"a":1}`, f.jsonQuery, "update_cart"},
		{"text", "POST", "/ucp/v1/carts", "k-text", "text/plain", "", `hello`, f.text, "create_cart"},
		{"gzip", "POST", "/ucp/v1/carts", "k-gzip", "application/json", "gzip", string(mustHex(t, f.gzipBody)), f.gzip, "create_cart"},
		{"graphql", "POST", "/graphql", "k-gql", "application/json", "", v1GraphQLBody, f.graphql, "gql"},
	} {
		sk := scopeKey(tp.p, "", auth, tc.key)
		if tc.key == "k-json" && sk.String() != f.scope {
			t.Fatalf("store key = %s; want the first release's %s", sk, f.scope)
		}
		var fp keystore.Fingerprint
		copy(fp[:], mustHex(t, tc.fp))
		res, err := tp.store.Reserve(ctx, sk, keystore.ReserveOptions{Fingerprint: fp, Route: tc.route, Lease: time.Minute, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		stored := &keystore.Response{Status: 201, Header: http.Header{"X-Release": {"first"}}, Body: []byte("answer of " + tc.name)}
		if err := tp.store.Complete(ctx, sk, res.Token, stored); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(tc.method, tp.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Idempotency-Key", tc.key)
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Content-Type", tc.ct)
		if tc.enc != "" {
			req.Header.Set("Content-Encoding", tc.enc)
		}
		resp, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r := readResult(t, resp)
		if r.status != 201 || string(r.body) != "answer of "+tc.name || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: retry after the upgrade = %v; want the first release's stored answer, replayed", tc.name, r)
		}
		// A different request under the same key is still a reuse.
		req, _ = http.NewRequest(tc.method, tp.URL+tc.path, strings.NewReader(`{"other":true}`))
		req.Header.Set("Idempotency-Key", tc.key)
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Content-Type", "application/json")
		resp, err = tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r := readResult(t, resp); r.status != 409 {
			t.Errorf("%s: another request under the key = %v; want 409", tc.name, r)
		}
	}
	if n := up.total.Load(); n != 0 {
		t.Errorf("the upstream ran %d requests; want 0", n)
	}
}

func gzipped(t *testing.T, s string, mtime time.Time) string {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.ModTime = mtime
	zw.Write([]byte(s))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestFingerprintRetries is issue 13's finding 4, through the proxy: honest
// retries replay, different requests never share an answer.
func TestFingerprintRetries(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	routes := []Route{
		{Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true},
		{Name: "gql", Method: "POST", Path: "/graphql", Idempotent: true, Protocol: ProtocolGraphQL, FingerprintIgnore: []string{"/variables/input/clientMutationId"}},
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = routes
		o.Idempotency.MaxBodyBytes = 1024
	})
	send := func(path, key, ct, enc, body string) result {
		t.Helper()
		req, _ := http.NewRequest("POST", tp.URL+path, strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", ct)
		if enc != "" {
			req.Header.Set("Content-Encoding", enc)
		}
		res, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResult(t, res)
	}
	replays := func(name string, first, retry result) {
		t.Helper()
		if first.status != 201 || retry.status != 201 || !bytes.Equal(first.body, retry.body) || retry.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("%s: first %v, retry %v; want the retry to replay the first", name, first, retry)
		}
	}

	// A route renamed by a hot reload: the retry replays.
	first := send("/ucp/v1/carts", "rename", "application/json", "", `{"a":1}`)
	st := tp.p.Policy()
	renamed := append([]Route(nil), st.Routes...)
	renamed[0].Name = "create_cart_v2"
	st.Routes = renamed
	if err := tp.p.Apply(st); err != nil {
		t.Fatal(err)
	}
	replays("renamed route", first, send("/ucp/v1/carts", "rename", "application/json", "", `{ "a": 1 }`))

	// gzip recompressed with another mtime; and the plain body itself.
	body := `{"items":[1,2]}`
	first = send("/ucp/v1/carts", "gz", "application/json", "gzip", gzipped(t, body, time.Unix(1, 0)))
	replays("gzip, new mtime", first, send("/ucp/v1/carts", "gz", "application/json", "gzip", gzipped(t, body, time.Unix(2, 0))))
	replays("gzip, then plain", first, send("/ucp/v1/carts", "gz", "application/json", "", body))
	if r := send("/ucp/v1/carts", "gz", "application/json", "gzip", gzipped(t, `{"items":[2,1]}`, time.Unix(1, 0))); r.status != 409 || problemCode(t, r) != "idempotency_key_reused" {
		t.Errorf("gzip of another body = %v; want 409 idempotency_key_reused", r)
	}
	if r := send("/ucp/v1/carts", "badgz", "application/json", "gzip", "not gzip"); r.status != 400 || problemCode(t, r) != "request_body_invalid" {
		t.Errorf("bad gzip = %v; want 400 request_body_invalid", r)
	}
	bomb := gzipped(t, `{"pad":"`+strings.Repeat("x", 4096)+`"}`, time.Unix(1, 0))
	if len(bomb) > 1024 {
		t.Fatalf("compressed %d bytes; want under max_body_bytes", len(bomb))
	}
	if r := send("/ucp/v1/carts", "bomb", "application/json", "gzip", bomb); r.status != 413 || problemCode(t, r) != "request_too_large" {
		t.Errorf("gzip over max_body_bytes decoded = %v; want 413 request_too_large", r)
	}

	// text/plain equal to a JSON body's canonical form: never the JSON answer.
	first = send("/ucp/v1/carts", "kind", "application/json", "", `{ "b":1, "a":2 }`)
	if r := send("/ucp/v1/carts", "kind", "text/plain", "", `{"a":2,"b":1}`); r.status != 409 || problemCode(t, r) != "idempotency_key_reused" {
		t.Errorf("text/plain equal to the canonical JSON = %v; want 409 idempotency_key_reused, never %v", r, first)
	}

	// GraphQL: an ignored variable and tracing extensions change per
	// attempt; the persisted-query hash does not.
	const doc = `mutation Add($input: AddInput!) { add(input: $input) { id } }`
	first = send("/graphql", "g1", "application/json", "", `{"query":"`+doc+`","variables":{"input":{"n":1,"clientMutationId":"a1"}},"extensions":{"tracing":{"start":1}}}`)
	replays("graphql, ignored variable and tracing changed", first,
		send("/graphql", "g1", "application/json", "", `{"query":"`+doc+`","variables":{"input":{"clientMutationId":"a2","n":1}},"extensions":{"tracing":{"start":2}}}`))
	if r := send("/graphql", "g1", "application/json", "", `{"query":"`+doc+`","variables":{"input":{"n":2,"clientMutationId":"a1"}}}`); r.status != 409 {
		t.Errorf("graphql, another variable = %v; want 409", r)
	}
	first = send("/graphql", "g2", "application/json", "", `{"query":"`+doc+`","extensions":{"persistedQuery":{"version":1,"sha256Hash":"aa"}}}`)
	if r := send("/graphql", "g2", "application/json", "", `{"query":"`+doc+`","extensions":{"persistedQuery":{"version":1,"sha256Hash":"bb"}}}`); r.status != 409 {
		t.Errorf("graphql, another persisted-query hash = %v; want 409", r)
	}
}

// TestNestedCodingsRefused: a body of 1,500 nested gzip layers, each valid,
// announced as 1,500 codings, is refused with 400 request_body_invalid
// before anything is decoded, and the upstream sees nothing; two layers
// (gzip, gzip) are still decoded. Before the limit, every layer was
// decoded and the write ran.
func TestNestedCodingsRefused(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	nest := func(body string, layers int) string {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.NoCompression)
		for range layers {
			b2 := bytes.Buffer{}
			zw.Reset(&b2)
			zw.Write([]byte(body))
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
			body = b2.String()
		}
		return body
	}
	send := func(key, body string, layers int) result {
		t.Helper()
		req, _ := http.NewRequest("POST", tp.URL+"/ucp/v1/carts", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Content-Encoding", strings.TrimSuffix(strings.Repeat("gzip, ", layers), ", "))
		res, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResult(t, res)
	}
	if r := send("bomb", nest(`{"a":1}`, 1500), 1500); r.status != 400 || problemCode(t, r) != "request_body_invalid" {
		t.Errorf("1,500 nested gzip layers = %d (%d bytes); want 400 request_body_invalid", r.status, len(r.body))
	}
	if r := send("three", nest(`{"a":1}`, 3), 3); r.status != 400 || problemCode(t, r) != "request_body_invalid" {
		t.Errorf("3 nested gzip layers = %d (%d bytes); want 400 request_body_invalid", r.status, len(r.body))
	}
	if n := up.total.Load(); n != 0 {
		t.Errorf("the upstream ran %d requests; want 0", n)
	}
	first := send("two", nest(`{"a":1}`, 2), 2)
	retry := send("two", nest(`{ "a": 1 }`, 1), 1)
	if first.status != 201 || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("gzip, gzip = %v, then one layer = %v; want it decoded and replayed", first, retry)
	}
}
