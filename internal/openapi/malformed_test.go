package openapi

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A document idemgate cannot use gives one error line naming the file and
// what is wrong, and the command fails.
func TestImportMalformed(t *testing.T) {
	t.Parallel()
	const info = "info: {title: t, version: \"1\"}\n"
	cases := []struct {
		name, doc, want string
	}{
		{"broken $ref", "openapi: 3.0.3\n" + info + `paths:
  /a:
    post:
      requestBody: {$ref: "#/components/requestBodies/Missing"}
      responses: {"200": {description: ok}}
`, "Missing"},
		{"broken parameter $ref in Swagger 2.0", "swagger: \"2.0\"\n" + info + `paths:
  /a:
    post:
      parameters: [{$ref: "#/parameters/Nope"}]
      responses: {"200": {description: ok}}
`, "Nope"},
		{"$ref cycle", "openapi: 3.0.3\n" + info + `paths:
  /a:
    post:
      parameters: [{$ref: "#/components/parameters/A"}]
      responses: {"200": {description: ok}}
components:
  parameters:
    A: {$ref: "#/components/parameters/B"}
    B: {$ref: "#/components/parameters/A"}
`, "parameters"},
		{"path item $ref cycle", "openapi: 3.0.3\n" + info + `paths:
  /a: {$ref: "#/paths/~1b"}
  /b: {$ref: "#/paths/~1a"}
`, "paths"},
		{"external $ref to a URL", "openapi: 3.0.3\n" + info + `paths:
  /a:
    post:
      requestBody: {$ref: "http://127.0.0.1:1/body.yaml"}
      responses: {"200": {description: ok}}
`, "only local files"},
		{"external $ref to a missing file", "openapi: 3.0.3\n" + info + `paths:
  /a:
    post:
      requestBody: {$ref: "missing.yaml#/Body"}
      responses: {"200": {description: ok}}
`, "missing.yaml"},
		{"unknown openapi version", "openapi: 4.0.0\n" + info + "paths: {}\n", `openapi version "4.0.0" is not supported`},
		{"unknown swagger version", "swagger: \"1.2\"\n" + info + "paths: {}\n", `swagger version "1.2" is not supported`},
		{"no version", info + "paths: {}\n", `neither "openapi"`},
		{"both versions", "openapi: 3.0.3\nswagger: \"2.0\"\n" + info, "both"},
		{"not YAML", "openapi: [3.0\n", "not a YAML or JSON document"},
		{"no paths", "openapi: 3.0.3\n" + info + "paths: {}\n", "no paths"},
		{"swagger host with a path", "swagger: \"2.0\"\nhost: example.com/v1\n" + info + `paths:
  /a: {post: {responses: {"200": {description: ok}}}}
`, "invalid host"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := writeFile(t, t.TempDir(), "spec.yaml", c.doc)
			var out, errOut bytes.Buffer
			err := RunImport([]string{p}, &out, &errOut)
			if err == nil {
				t.Fatalf("RunImport = nil; want an error\nstdout:\n%s", out.String())
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.HasPrefix(msg, p+": ") || !strings.Contains(msg, c.want) {
				t.Errorf("error = %q; want one line starting with %q and containing %q", msg, p+": ", c.want)
			}
			if out.Len() != 0 {
				t.Errorf("stdout = %q; want nothing", out.String())
			}
		})
	}
}

// The OpenAPI 3.1 Petstore resolves schemas by JSON Schema $id
// ("/components/schemas/petdetails#pet_details_id"), which kin-openapi does
// not follow. Routes need no schema and the importer drops them before
// kin-openapi resolves anything (slim.go), so the document imports: its
// three writes become routes (it was refused for a $ref no route reads).
func TestImportPetstore31IDRefs(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if err := RunImport([]string{"testdata/petstore31/petstore.yaml"}, &out, &errOut); err != nil {
		t.Fatalf("RunImport = %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"name: addPet", "name: updatePet", "name: deletePet", "path: /api/v31/pet/{petId}"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("routes lack %q:\n%s", want, out.String())
		}
	}
}

func TestImportUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{},
		{"a.yaml", "b.yaml"},
		{"a.yaml", "--out", "x", "--merge", "y"},
		{"a.yaml", "--dry-run"},
		{"a.yaml", "--base-path", "v1"},
		{"--nope", "a.yaml"},
	} {
		var errOut bytes.Buffer
		if err := RunImport(args, &bytes.Buffer{}, &errOut); err != ErrUsage {
			t.Errorf("RunImport(%q) = %v; want ErrUsage", args, err)
		}
		if !strings.Contains(errOut.String(), "usage:") {
			t.Errorf("RunImport(%q) printed no usage:\n%s", args, errOut.String())
		}
	}
	if err := RunRoutes([]string{"export"}, &bytes.Buffer{}, &bytes.Buffer{}); err != ErrUsage {
		t.Errorf("RunRoutes(export) = %v; want ErrUsage", err)
	}
}

// External $refs to local files resolve, relative to the document (an
// operation's parameters and a whole path item).
func TestImportLocalExternalRefs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "parts"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "parts/common.yaml", `KeyRequired:
  name: Idempotency-Key
  in: header
  required: true
  schema: {type: string}
`)
	writeFile(t, dir, "parts/orders.yaml", `post:
  operationId: placeOrder
  parameters: [{$ref: "common.yaml#/KeyRequired"}]
  responses: {"201": {description: ok}}
`)
	p := writeFile(t, dir, "spec.yaml", `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /orders: {$ref: "parts/orders.yaml"}
`)
	spec, err := LoadSpec(p)
	if err != nil {
		t.Fatal(err)
	}
	res := Import(spec, Options{})
	if len(res.Routes) != 1 || describe(res.Routes[0]) != "POST /orders placeOrder idempotent require_key" {
		t.Errorf("routes = %+v; want POST /orders placeOrder with require_key", res.Routes)
	}
}
