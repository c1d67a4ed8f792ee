package openapi

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const mergeSpec = `openapi: 3.0.3
info: {title: shop, version: "1"}
servers: [{url: /api}]
paths:
  /carts:
    post:
      operationId: createCart
      x-ratelimit: {requests: 100, per: 60s}
      responses: {"201": {description: ok}}
  /carts/{cartId}:
    put:
      operationId: updateCart
      x-idempotency: {session: cartId}
      responses: {"200": {description: ok}}
    delete:
      operationId: deleteCart
      parameters: [{name: Idempotency-Key, in: header, required: true, schema: {type: string}}]
      responses: {"204": {description: ok}}
  /orders:
    post:
      operationId: placeOrder
      responses: {"201": {description: ok}}
`

const mergeConfig = `# The shop's idemgate.
listen: ":8080"

upstream:
  url: "http://127.0.0.1:3000"   # the app

routes:
  # Carts are created by agents.
  - name: create_cart          # hand-picked name
    method: POST
    path: /api/carts
    idempotent: true
    timeout: 5s                # hand-set: the importer never touches it
    rate_limit: { requests: 600, per: 60s }   # the document says 100

  - name: update_cart
    method: PUT
    path: "/api/carts/{id}"
    mode: observe

  # A route the document does not have.
  - {name: legacy, method: POST, path: /old, idempotent: true}

mode: enforce
`

const mergeWant = `# The shop's idemgate.
listen: ":8080"

upstream:
  url: "http://127.0.0.1:3000"   # the app

routes:
  # Carts are created by agents.
  - name: create_cart          # hand-picked name
    method: POST
    path: /api/carts
    idempotent: true
    timeout: 5s                # hand-set: the importer never touches it
    rate_limit: {requests: 100, per: 60s}   # the document says 100

  - name: update_cart
    method: PUT
    path: "/api/carts/{id}"
    mode: observe
    idempotent: true
    session: id

  # A route the document does not have.
  - {name: legacy, method: POST, path: /old, idempotent: true}
  - name: deleteCart
    method: DELETE
    path: /api/carts/{cartId}
    idempotent: true
    require_key: true
  - name: placeOrder
    method: POST
    path: /api/orders
    idempotent: true

mode: enforce
`

func TestMerge(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specPath := writeFile(t, dir, "spec.yaml", mergeSpec)
	cfgPath := writeFile(t, dir, "idemgate.yaml", mergeConfig)

	// --dry-run prints the diff and changes nothing.
	var out, errOut bytes.Buffer
	if err := RunImport([]string{specPath, "--merge", cfgPath, "--dry-run"}, &out, &errOut); err != nil {
		t.Fatalf("dry run = %v\n%s", err, errOut.String())
	}
	if b, _ := os.ReadFile(cfgPath); string(b) != mergeConfig {
		t.Errorf("--dry-run changed the file")
	}
	diff := out.String()
	for _, want := range []string{"--- " + cfgPath + "\n", "+++ " + cfgPath + " (merged)\n", "-    rate_limit: { requests: 600, per: 60s }", "+    rate_limit: {requests: 100, per: 60s}   # the document says 100", "+    session: id", "+  - name: placeOrder"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	for _, want := range []string{
		`route "create_cart": rate_limit changed from {requests: 600, per: 60s} to {requests: 100, per: 60s}`,
		`route "update_cart": idempotent set from the document`,
		`route "legacy" (POST /old) has no operation in the document; kept as it is`,
		`route "deleteCart" (DELETE /api/carts/{cartId}) added`,
	} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("notes lack %q:\n%s", want, errOut.String())
		}
	}

	// The merge itself.
	out.Reset()
	errOut.Reset()
	if err := RunImport([]string{specPath, "--merge", cfgPath}, &out, &errOut); err != nil {
		t.Fatalf("merge = %v\n%s", err, errOut.String())
	}
	got, _ := os.ReadFile(cfgPath)
	if string(got) != mergeWant {
		t.Errorf("merged config:\n%s", UnifiedDiff("want", "got", []byte(mergeWant), got))
	}
	cfg, _ := validateConfig(t, got)
	if len(cfg.Routes) != 5 {
		t.Errorf("merged config has %d routes; want 5", len(cfg.Routes))
	}
	// Applied twice, the merge changes nothing more.
	out.Reset()
	if err := RunImport([]string{specPath, "--merge", cfgPath, "--dry-run"}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if out.Len() != 0 {
		t.Errorf("second merge would change:\n%s", out.String())
	}
}

func TestMergeShapes(t *testing.T) {
	t.Parallel()
	spec, err := LoadSpec(writeFile(t, t.TempDir(), "spec.yaml", mergeSpec))
	if err != nil {
		t.Fatal(err)
	}
	res := Import(spec, Options{})
	res.PathCaseSensitive = true
	cases := []struct {
		name, config string
		want         []string // substrings of the merged config
	}{
		{"no routes key", "upstream: {url: \"http://127.0.0.1:1\"}\n", []string{"path_case: sensitive", "routes:\n  - name: createCart\n"}},
		{"null routes", "upstream: {url: \"http://127.0.0.1:1\"}\nroutes:\nmode: enforce\n", []string{"path_case: sensitive  #", "routes:\n  - name: createCart\n", "mode: enforce\n"}},
		{"flow routes", "upstream: {url: \"http://127.0.0.1:1\"}\nroutes: [{name: x, method: GET, path: /x}]\n", []string{"routes:\n  - name: x\n    method: GET\n", "  - name: placeOrder\n"}},
		{"routes at column 0", "upstream: {url: \"http://127.0.0.1:1\"}\nroutes:\n- name: x\n  method: GET\n  path: /x\npath_case: insensitive\n", []string{"- name: x\n  method: GET\n  path: /x\n- name: createCart\n", "path_case: sensitive\n"}},
		{"empty file", "", []string{"routes:\n  - name: createCart\n"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, _, err := Merge([]byte(c.config), res)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(string(got), w) {
					t.Errorf("merged config lacks %q:\n%s", w, got)
				}
			}
			if c.config != "" {
				validateConfig(t, got)
			}
		})
	}
	for _, bad := range []string{"- a\n- b\n", "routes: 3\n", "routes: [1]\n", "a: [\n"} {
		if _, _, err := Merge([]byte(bad), res); err == nil {
			t.Errorf("Merge(%q) = nil error", bad)
		}
	}
}

// Entries whose layout allows it are edited line by line (values replaced
// in place, keys inserted before trailing comments); others are
// re-encoded whole, without duplicating comments yaml.v3 attaches to the
// wrong node.
func TestMergeLayouts(t *testing.T) {
	t.Parallel()
	spec, err := LoadSpec(writeFile(t, t.TempDir(), "spec.yaml", mergeSpec))
	if err != nil {
		t.Fatal(err)
	}
	res := Import(spec, Options{})
	cases := []struct{ name, config, want string }{
		{"wide indent, comments around", `routes:
    # head of a
    -   name: a
        method: POST
        path: /api/carts
        # inner comment
        timeout: 5s
        # trailing inside a
    # head of b (at dash col)

    -   name: b   # line b
        method: PUT
        path: '/api/carts/{id}'   # quoted
        session: "x"  # wrong
        # foot of b inside
# foot of routes at col 0
mode: enforce # end
`, `routes:
    # head of a
    -   name: a
        method: POST
        path: /api/carts
        # inner comment
        timeout: 5s
        idempotent: true
        rate_limit: {requests: 100, per: 60s}
        # trailing inside a
    # head of b (at dash col)

    -   name: b   # line b
        method: PUT
        path: '/api/carts/{id}'   # quoted
        session: id  # wrong
        idempotent: true
        # foot of b inside
    - name: deleteCart
      method: DELETE
      path: /api/carts/{cartId}
      idempotent: true
      require_key: true
    - name: placeOrder
      method: POST
      path: /api/orders
      idempotent: true
# foot of routes at col 0
mode: enforce # end
`},
		{"block value re-encodes the entry", `routes:
  - name: a   # keep me
    method: POST
    path: /api/carts
    rate_limit:
      requests: 1
      per: 1s
  # next
  - {name: b, method: PUT, path: "/api/carts/{id}"}
  - name: c
    method: DELETE
    path: /api/carts/{id}
    require_key: true
  - name: d
    method: POST
    path: /api/orders
    idempotent: true
`, `routes:
  - name: a # keep me
    method: POST
    path: /api/carts
    rate_limit: {requests: 100, per: 60s}
    idempotent: true
  # next
  - {name: b, method: PUT, path: "/api/carts/{id}", idempotent: true, session: id}
  - name: c
    method: DELETE
    path: /api/carts/{id}
    require_key: true
    idempotent: true
  - name: d
    method: POST
    path: /api/orders
    idempotent: true
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, _, err := Merge([]byte(c.config), res)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("merged:\n%s", UnifiedDiff("want", "got", []byte(c.want), got))
			}
			validateConfig(t, got)
		})
	}
}

func TestMergeKeepsFileMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specPath := writeFile(t, dir, "spec.yaml", mergeSpec)
	cfgPath := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfgPath, []byte("upstream: {url: \"http://127.0.0.1:1\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RunImport([]string{specPath, "--merge", cfgPath}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(cfgPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode after merge = %v, %v; want 0600", st.Mode(), err)
	}
}

// With --merge, the key header is the config's idempotency.header.
func TestMergeKeyHeaderFromConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specPath := writeFile(t, dir, "spec.yaml", `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /a:
    post:
      operationId: a
      parameters: [{name: X-Request-Key, in: header, required: true, schema: {type: string}}]
      responses: {"200": {description: ok}}
`)
	cfgPath := writeFile(t, dir, "c.yaml", "upstream: {url: \"http://127.0.0.1:1\"}\nidempotency:\n  header: X-Request-Key\n")
	if err := RunImport([]string{specPath, "--merge", cfgPath}, &bytes.Buffer{}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(cfgPath)
	if !strings.Contains(string(got), "require_key: true") {
		t.Errorf("merged config lacks require_key:\n%s", got)
	}
	var out bytes.Buffer
	if err := RunImport([]string{specPath}, &out, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "require_key") {
		t.Errorf("without --merge the key header is Idempotency-Key; got require_key:\n%s", out.String())
	}
}

// A generated route appended to a config never makes it invalid: a taken
// name gets a suffix, an ambiguous path is not added; a route with the
// operation's name but another method is not taken for it.
func TestMergeAddsValidRoutes(t *testing.T) {
	t.Parallel()
	spec, err := LoadSpec(writeFile(t, t.TempDir(), "spec.yaml", mergeSpec))
	if err != nil {
		t.Fatal(err)
	}
	res := Import(spec, Options{})
	config := `upstream: {url: "http://127.0.0.1:1"}
routes:
  - {name: placeOrder, method: GET, path: /api/orders}
  - {name: odd, method: PUT, path: "/api/{x}/y"}
`
	// PUT /api/carts/{cartId} (updateCart) and PUT /api/{x}/y both match
	// /api/carts/y with one literal each.
	got, notes, err := Merge([]byte(config), res)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := validateConfig(t, got)
	var names []string
	for _, r := range cfg.Routes {
		names = append(names, r.Name+" "+r.Method+" "+r.Path)
	}
	want := "placeOrder GET /api/orders|odd PUT /api/{x}/y|createCart POST /api/carts|deleteCart DELETE /api/carts/{cartId}|placeOrder_2 POST /api/orders"
	if strings.Join(names, "|") != want {
		t.Errorf("routes = %s\nwant %s", strings.Join(names, "|"), want)
	}
	all := strings.Join(notes, "\n")
	for _, w := range []string{
		`route "updateCart" (PUT /api/carts/{cartId}) not added: it and route "odd" (PUT /api/{x}/y) both match /api/carts/y equally`,
		`route name "placeOrder" is taken; the route for POST /api/orders is named "placeOrder_2"`,
	} {
		if !strings.Contains(all, w) {
			t.Errorf("notes lack %q:\n%s", w, all)
		}
	}
}
