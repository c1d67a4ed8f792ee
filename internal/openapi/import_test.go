package openapi

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The real documents: golden routes and problems, the routes validate, and
// every write operation is a route.
func TestImportGolden(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, spec  string
		ops, writes int
		routes      int
		wantDropped bool
	}{
		{"petstore2", "testdata/petstore2/petstore.json", 20, 12, 12, false},
		{"petstore3", "testdata/petstore3/openapi.yaml", 19, 11, 11, false},
		{"ucp", "testdata/ucp/ucp.yaml", 11, 7, 10, true},
		{"harbor", "testdata/harbor/swagger.yaml", 203, 88, 88, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			spec, err := LoadSpec(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			res := Import(spec, Options{})
			var out, errOut bytes.Buffer
			out.Write(Render(spec, res))
			for _, p := range res.Problems {
				fmt.Fprintln(&errOut, c.spec+p.String())
			}
			golden(t, c.name+".yaml", out.Bytes())
			golden(t, c.name+".stderr", errOut.Bytes())
			if res.Operations != c.ops || res.Writes != c.writes || len(res.Routes) != c.routes {
				t.Errorf("operations, writes, routes = %d, %d, %d; want %d, %d, %d", res.Operations, res.Writes, len(res.Routes), c.ops, c.writes, c.routes)
			}
			cfg, dropped := validateConfig(t, out.Bytes())
			if len(cfg.Routes) != c.routes {
				t.Errorf("config has %d routes; want %d", len(cfg.Routes), c.routes)
			}
			if (len(dropped) > 0) != c.wantDropped {
				t.Logf("keys config does not know yet, not validated: %v", dropped)
			}
			// Every write operation is matched by an idempotent route of
			// its method (checked by the same code as validate --against).
			rep := Against(spec, res.Routes, Options{})
			if len(rep.Unprotected) > 0 || len(rep.Unmatched) > 0 {
				t.Errorf("against its own routes: %d unprotected %v, %d unmatched %v", len(rep.Unprotected), rep.Unprotected, len(rep.Unmatched), rep.Unmatched)
			}
		})
	}
}

// Import and Render do not depend on map order: the same document gives
// the same bytes every time (the golden tests compare with a stored run).
func TestImportDeterministic(t *testing.T) {
	t.Parallel()
	spec, err := LoadSpec("testdata/harbor/swagger.yaml")
	if err != nil {
		t.Fatal(err)
	}
	first := Render(spec, Import(spec, Options{}))
	for i := range 20 {
		if got := Render(spec, Import(spec, Options{})); !bytes.Equal(first, got) {
			t.Fatalf("run %d printed other bytes than run 0", i+1)
		}
	}
}

func TestImportUCPExtensions(t *testing.T) {
	t.Parallel()
	spec, err := LoadSpec("testdata/ucp/ucp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res := Import(spec, Options{})
	byName := map[string]Route{}
	for _, r := range res.Routes {
		byName[r.Name] = r
	}
	complete := byName["completeCheckout"]
	if !complete.RequireKey || complete.SessionParam != "id" || complete.RateLimit == nil ||
		complete.RateLimit.Requests != 60 || complete.RateLimit.By != "header:Ucp-Agent" || complete.RateLimit.Algorithm != "window" {
		t.Errorf("completeCheckout = %+v (limit %+v)", complete, complete.RateLimit)
	}
	if r := byName["createCart"]; r.RequireKey || r.Retention != "25h" || !slices.Equal(r.FingerprintIgnore, []string{"/meta/sent_at"}) || r.Path != "/ucp/v1/carts" {
		t.Errorf("createCart = %+v", r)
	}
	if r := byName["updateCheckout"]; r.InProgress != "wait" {
		t.Errorf("updateCheckout.InProgress = %q; want wait", r.InProgress)
	}
	if r := byName["getCheckout"]; r.Idempotent || r.SessionParam != "id" || r.RateLimit == nil {
		t.Errorf("getCheckout = %+v; want a session read with a limit", r)
	}
	if _, ok := byName["handoff"]; ok {
		t.Errorf("handoff (a GET without extensions) became a route")
	}
}

// Small documents, one construct each: what the route gets and which
// problems are reported, each naming the operation's JSON pointer.
func TestImportConstructs(t *testing.T) {
	t.Parallel()
	const head = "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\n"
	cases := []struct {
		name     string
		doc      string
		opts     Options
		want     string   // the routes, one "METHOD PATH name flags" line each
		problems []string // substrings, one per problem line, in order
		caseSens bool
	}{
		{
			name: "graphql content type",
			doc: head + `paths:
  /graphql:
    post:
      requestBody: {content: {application/graphql: {schema: {type: string}}, application/json: {schema: {type: object}}}}
      responses: {"200": {description: ok}}
`,
			want: "POST /graphql post_graphql idempotent protocol=graphql",
		},
		{
			name: "a JSON body with a query member is not GraphQL",
			doc: head + `paths:
  /search:
    post:
      operationId: search
      requestBody: {content: {application/json: {schema: {type: object, properties: {query: {type: string}}}}}}
      responses: {"200": {description: ok}}
`,
			want: "POST /search search idempotent",
		},
		{
			name: "graphql by extension",
			doc: head + `paths:
  /api:
    post:
      operationId: gql
      x-idempotency: {protocol: graphql}
      responses: {"200": {description: ok}}
`,
			want: "POST /api gql idempotent protocol=graphql",
		},
		{
			name: "paths differing only in case",
			doc: head + `paths:
  /Users/{id}:
    delete: {operationId: delUpper, responses: {"204": {description: ok}}}
  /users/{id}:
    delete: {operationId: delLower, responses: {"204": {description: ok}}}
`,
			want:     "DELETE /Users/{id} delUpper idempotent\nDELETE /users/{id} delLower idempotent",
			caseSens: true,
		},
		{
			name: "server base path with variables, path item and operation servers",
			doc: head + `servers:
  - url: "{scheme}://api.example.com/{version}"
    variables:
      scheme: {default: https}
      version: {default: v2, enum: [v1, v2]}
paths:
  /a:
    post: {operationId: a, responses: {"200": {description: ok}}}
  /b:
    servers: [{url: /legacy}]
    post: {operationId: b, responses: {"200": {description: ok}}}
    put:
      operationId: c
      servers: [{url: "https://other.example.com/x/"}]
      responses: {"200": {description: ok}}
`,
			want:     "POST /legacy/b b idempotent\nPOST /v2/a a idempotent\nPUT /x/b c idempotent",
			problems: []string{"#/servers/0/variables/version: the base path has a variable with several values; its default \"v2\" is used"},
		},
		{
			name: "--base-path overrides",
			opts: Options{BasePath: "/edge"},
			doc: head + `servers: [{url: https://api.example.com/v1}]
paths:
  /a:
    post: {operationId: a, responses: {"200": {description: ok}}}
`,
			want: "POST /edge/a a idempotent",
		},
		{
			name: "several servers with different base paths",
			doc: head + `servers: [{url: https://api.example.com/v1}, {url: https://api.example.com/v2}]
paths:
  /a:
    post: {operationId: a, responses: {"200": {description: ok}}}
`,
			want:     "POST /v1/a a idempotent",
			problems: []string{"#/servers/1: server base path \"/v2\" differs from the first server's \"/v1\""},
		},
		{
			name: "mixed segments widen, then collide",
			doc: head + `paths:
  /files/{name}.json:
    put: {operationId: putJSON, responses: {"200": {description: ok}}}
  /files/{name}.xml:
    put: {operationId: putXML, responses: {"200": {description: ok}}}
  /users/{user-id}:publish:
    post: {operationId: publish, x-idempotency: {session: user-id}, responses: {"200": {description: ok}}}
`,
			want: "PUT /files/{name} putJSON idempotent\nPOST /users/{user_id} publish idempotent session=user_id",
			problems: []string{
				"#/paths/~1files~1{name}.json/put: segment \"{name}.json\" mixes parameters and literal text",
				"#/paths/~1files~1{name}.xml/put: segment \"{name}.xml\" mixes parameters",
				"#/paths/~1users~1{user-id}:publish/post: segment \"{user-id}:publish\" mixes",
				"#/paths/~1files~1{name}.xml/put: converts to PUT /files/{name} like #/paths/~1files~1{name}.json/put (route putJSON); not imported: that route protects it",
			},
		},
		{
			name: "ambiguous templates",
			doc: head + `paths:
  /a/{x}/c:
    post: {operationId: one, responses: {"200": {description: ok}}}
  /a/b/{y}:
    post: {operationId: two, responses: {"200": {description: ok}}}
`,
			want:     "POST /a/b/{y} two idempotent",
			problems: []string{"#/paths/~1a~1{x}~1c/post: POST /a/{x}/c and route two (POST /a/b/{y}) both match /a/b/c equally; not imported"},
		},
		{
			name: "names: invalid characters, duplicates, none",
			doc: head + `paths:
  /a:
    post: {operationId: "create thing", responses: {"200": {description: ok}}}
    put: {operationId: same, responses: {"200": {description: ok}}}
  /b/{id}:
    post: {operationId: same, responses: {"200": {description: ok}}}
    delete: {responses: {"200": {description: ok}}}
`,
			want: "POST /a create_thing idempotent\nPUT /a same idempotent\nPOST /b/{id} same_2 idempotent\nDELETE /b/{id} delete_b_id idempotent",
			problems: []string{
				"#/paths/~1a/post: operationId \"create thing\" has characters a route name cannot; named \"create_thing\"",
				"#/paths/~1b~1{id}/post: route name \"same\" is also the name of #/paths/~1a/put",
			},
		},
		{
			name: "key header: required, optional, on a path item, extension wins",
			doc: head + `paths:
  /a:
    parameters: [{name: idempotency-key, in: header, required: true, schema: {type: string}}]
    post: {operationId: a, responses: {"200": {description: ok}}}
    put:
      operationId: b
      parameters: [{name: Idempotency-Key, in: header, required: false, schema: {type: string}}]
      responses: {"200": {description: ok}}
    patch:
      operationId: c
      x-idempotency: {required: false}
      responses: {"200": {description: ok}}
`,
			want:     "POST /a a idempotent require_key\nPUT /a b idempotent\nPATCH /a c idempotent",
			problems: []string{"#/paths/~1a/patch: x-idempotency.required is false but the Idempotency-Key parameter has required: true; the extension wins"},
		},
		{
			name: "bad extension values are reported, not dropped silently",
			doc: head + `paths:
  /a/{id}:
    get:
      operationId: read
      x-idempotency: {session: {header: X-Cart-Id}, retention: 1h}
      responses: {"200": {description: ok}}
    post:
      operationId: write
      x-idempotency: {session: nope, retention: soon, in_progress: maybe, fingerprint_ignore: ["a/b", "/ok"], colour: red}
      x-ratelimit: {requests: 1.5, per: 60s}
      responses: {"200": {description: ok}}
    delete:
      operationId: gone
      x-idempotency: false
      responses: {"200": {description: ok}}
    put:
      operationId: limited
      x-ratelimit: {requests: 10, per: 30}
      responses: {"200": {description: ok}}
`,
			want: "GET /a/{id} read session=header:X-Cart-Id\nPOST /a/{id} write idempotent fingerprint_ignore=/ok\nPUT /a/{id} limited idempotent rate_limit=10/30s",
			problems: []string{
				"#/paths/~1a~1{id}/get/x-idempotency/retention: applies to writes only; ignored on GET",
				"#/paths/~1a~1{id}/post/x-idempotency/colour: unknown key",
				"#/paths/~1a~1{id}/post/x-idempotency/fingerprint_ignore: \"a/b\" is not an RFC 6901 JSON pointer",
				"#/paths/~1a~1{id}/post/x-idempotency/in_progress: want \"reject\" or \"wait\"",
				"#/paths/~1a~1{id}/post/x-idempotency/retention: want a positive duration",
				"#/paths/~1a~1{id}/post/x-idempotency/session: names parameter \"nope\"",
				"#/paths/~1a~1{id}/post/x-ratelimit/requests: want a whole number > 0; got 1.5",
				"#/paths/~1a~1{id}/delete: x-idempotency is false: no route",
			},
		},
		{
			name: "callbacks, webhooks and unknown methods are reported",
			doc: "openapi: 3.1.0\ninfo: {title: t, version: \"1\"}\n" + `paths:
  /subscribe:
    post:
      operationId: subscribe
      callbacks:
        onEvent:
          "{$request.body#/url}":
            post: {responses: {"200": {description: ok}}}
      responses: {"200": {description: ok}}
webhooks:
  newPet:
    post: {responses: {"200": {description: ok}}}
`,
			want: "POST /subscribe subscribe idempotent",
			problems: []string{
				"#/paths/~1subscribe/post/callbacks/onEvent: callbacks are requests the API makes",
				"#/webhooks/newPet: webhooks are requests the API makes",
			},
		},
		{
			name: "extensions above operations are reported",
			doc: head + `x-ratelimit: {requests: 1, per: 1s}
paths:
  /a:
    x-idempotency: {required: true}
    post: {operationId: a, responses: {"200": {description: ok}}}
`,
			want: "POST /a a idempotent",
			problems: []string{
				"#/x-ratelimit: is read on operations only",
				"#/paths/~1a/x-idempotency: is read on operations only",
			},
		},
		{
			name: "Swagger 2.0: consumes application/graphql, extensions, header parameter",
			doc: `swagger: "2.0"
info: {title: t, version: "1"}
basePath: /api
paths:
  /graphql:
    post:
      consumes: [application/graphql]
      parameters: [{name: body, in: body, schema: {type: string}}]
      responses: {"200": {description: ok}}
  /orders/{order.id}:
    put:
      operationId: putOrder
      parameters:
        - {name: order.id, in: path, required: true, type: string}
        - {name: Idempotency-Key, in: header, required: true, type: string}
      x-idempotency: {session: order.id, retention: 48h}
      x-ratelimit: {requests: 5, per: 10}
      responses: {"200": {description: ok}}
`,
			want: "POST /api/graphql post_graphql idempotent protocol=graphql\nPUT /api/orders/{order_id} putOrder idempotent require_key session=order_id rate_limit=5/10s",
		},
		{
			name: "literals are escaped, trailing slash kept, empty segment dropped",
			doc: head + `paths:
  /a b//c/:
    post: {operationId: x, responses: {"200": {description: ok}}}
`,
			want:     "POST /a%20b/c/ x idempotent",
			problems: []string{"#/paths/~1a b~1~1c~1/post: empty segment in \"/a b//c/\" dropped"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := writeFile(t, t.TempDir(), "spec.yaml", c.doc)
			spec, err := LoadSpec(p)
			if err != nil {
				t.Fatal(err)
			}
			res := Import(spec, c.opts)
			var lines []string
			for _, r := range res.Routes {
				lines = append(lines, describe(r))
			}
			if got := strings.Join(lines, "\n"); got != c.want {
				t.Errorf("routes:\n%s\nwant:\n%s", got, c.want)
			}
			var got []string
			for _, p := range res.Problems {
				got = append(got, p.String())
			}
			if len(got) != len(c.problems) {
				t.Errorf("%d problems; want %d:\n%s", len(got), len(c.problems), strings.Join(got, "\n"))
			} else {
				for i, w := range c.problems {
					if !strings.Contains(got[i], w) {
						t.Errorf("problem %d = %q; want it to contain %q", i, got[i], w)
					}
				}
			}
			if res.PathCaseSensitive != c.caseSens {
				t.Errorf("PathCaseSensitive = %t; want %t", res.PathCaseSensitive, c.caseSens)
			}
			out := Render(spec, res)
			validateConfig(t, out)
			// The command prints the same problems, one line each, as
			// SPEC#POINTER: message.
			var stdout, stderr bytes.Buffer
			args := []string{p}
			if c.opts.BasePath != "" {
				args = append(args, "--base-path", c.opts.BasePath)
			}
			if err := RunImport(args, &stdout, &stderr); err != nil {
				t.Fatal(err)
			}
			errLines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if stderr.Len() == 0 {
				errLines = nil
			}
			if len(errLines) != len(res.Problems) {
				t.Errorf("stderr has %d lines; want %d:\n%s", len(errLines), len(res.Problems), stderr.String())
			}
			for i, l := range errLines {
				if i < len(res.Problems) && l != p+res.Problems[i].String() {
					t.Errorf("stderr line %d = %q; want %q", i, l, p+res.Problems[i].String())
				}
			}
			if !bytes.Equal(stdout.Bytes(), out) {
				t.Errorf("RunImport printed other routes than Render")
			}
		})
	}
}

func describe(r Route) string {
	s := r.Method + " " + r.Path + " " + r.Name
	if r.Idempotent {
		s += " idempotent"
	}
	if r.RequireKey {
		s += " require_key"
	}
	if r.Protocol != "" {
		s += " protocol=" + r.Protocol
	}
	if r.SessionParam != "" {
		s += " session=" + r.SessionParam
	}
	if r.SessionHeader != "" {
		s += " session=header:" + r.SessionHeader
	}
	if len(r.FingerprintIgnore) > 0 {
		s += " fingerprint_ignore=" + strings.Join(r.FingerprintIgnore, ",")
	}
	if r.RateLimit != nil {
		s += fmt.Sprintf(" rate_limit=%d/%s", r.RateLimit.Requests, r.RateLimit.Per)
	}
	return s
}
