package openapi

import (
	"bytes"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
)

func TestAgainst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgPath := writeFile(t, dir, "idemgate.yaml", `upstream: {url: "http://127.0.0.1:3000"}
routes:
  - {name: add, method: POST, path: /v2/pet, idempotent: true}
  - {name: upd, method: PUT, path: /v2/pet}
  - {name: typo, method: POST, path: /v2/pets, idempotent: true}
  - {name: users, method: DELETE, path: "/v2/user/{name}", idempotent: true}
  - {name: special, method: DELETE, path: "/v2/user/admin", idempotent: true}
  - {name: orders, method: POST, path: "/v2/store/{any}", idempotent: true}
  - {name: read, method: GET, path: "/v2/pet/{id}", session: id}
  - {name: watch, method: POST, path: "/v2/user", idempotent: true, mode: observe}
`)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err = RunAgainst("testdata/petstore2/petstore.json", cfgPath, cfg, &out, &errOut)
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "9 unprotected writes, 1 unmatched routes") {
		t.Fatalf("RunAgainst = %v; want one line counting 9 unprotected writes and 1 unmatched route", err)
	}
	// POST /v2/store/order is protected by /v2/store/{any}, DELETE
	// /v2/user/{username} by /v2/user/{name} (and /v2/user/admin by its own
	// route); "typo" has no operation.
	want := `unprotected: #/paths/~1pet/put: PUT /v2/pet: route "upd" matches it, but is not idempotent
unprotected: #/paths/~1pet~1{petId}/delete: DELETE /v2/pet/{petId}: no route matches this write
unprotected: #/paths/~1pet~1{petId}/post: POST /v2/pet/{petId}: no route matches this write
unprotected: #/paths/~1pet~1{petId}~1uploadImage/post: POST /v2/pet/{petId}/uploadImage: no route matches this write
unprotected: #/paths/~1store~1order~1{orderId}/delete: DELETE /v2/store/order/{orderId}: no route matches this write
unprotected: #/paths/~1user/post: POST /v2/user: route "watch" matches it, but is in observe mode (nothing is enforced)
unprotected: #/paths/~1user~1createWithArray/post: POST /v2/user/createWithArray: no route matches this write
unprotected: #/paths/~1user~1createWithList/post: POST /v2/user/createWithList: no route matches this write
unprotected: #/paths/~1user~1{username}/put: PUT /v2/user/{username}: no route matches this write
unmatched: route "typo" (POST /v2/pets): matches no operation of the document
` + cfgPath + ` against testdata/petstore2/petstore.json: 3 of 12 write operations protected; 1 of 8 routes match no operation
`
	if out.String() != want {
		t.Errorf("report:\n%s", UnifiedDiff("want", "got", []byte(want), out.Bytes()))
	}
}

// Every generated config covers its own document exactly, and removing
// one route makes exactly that write unprotected.
func TestAgainstImported(t *testing.T) {
	t.Parallel()
	spec, err := LoadSpec("testdata/ucp/ucp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res := Import(spec, Options{})
	if rep := Against(spec, res.Routes, Options{}); len(rep.Unprotected)+len(rep.Unmatched) != 0 || rep.Writes != 7 {
		t.Fatalf("own routes: %+v", rep)
	}
	var less []Route
	for _, r := range res.Routes {
		if r.Name != "cancelCheckout" {
			less = append(less, r)
		}
	}
	rep := Against(spec, less, Options{})
	if len(rep.Unprotected) != 1 || rep.Unprotected[0].Pointer != "#/paths/~1checkout-sessions~1{id}~1cancel/post" {
		t.Errorf("without cancelCheckout: unprotected %v", rep.Unprotected)
	}
	// The base path counts: the same routes under another base path match
	// nothing.
	rep = Against(spec, res.Routes, Options{BasePath: "/other"})
	if len(rep.Unprotected) != 7 || len(rep.Unmatched) != len(res.Routes) {
		t.Errorf("under /other: %d unprotected, %d unmatched; want 7, %d", len(rep.Unprotected), len(rep.Unmatched), len(res.Routes))
	}
}
