package deploytest

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// chartOwnedKeys are config keys the chart sets itself and so keeps out of
// values.config: the listeners come from ports, secrets from Secrets.
var chartOwnedKeys = map[string]bool{
	"listen":                         true,
	"admin_listen":                   true,
	"store.redis.password":           true,
	"store.redis.sentinel_password":  true,
	"idempotency.encryption_key_env": true,
}

// TestSchemaMatchesConfig keeps values.schema.json's config section and
// idemgate's config package in step: every key idemgate reads (a
// mapstructure tag under config.Config) can be set through values.config,
// and the schema allows no key idemgate would refuse as unknown. The config
// package is read as source (go/ast), so this module does not depend on the
// main one.
func TestSchemaMatchesConfig(t *testing.T) {
	t.Parallel()
	goKeys := configKeys(t, filepath.Join(repoRoot, "config"))
	if len(goKeys) < 30 {
		t.Fatalf("found only %d config keys in the config package: %v", len(goKeys), goKeys)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	defs, _ := schema["$defs"].(map[string]any)
	cfg := dig(schema, "properties", "config").(map[string]any)
	schemaKeys := map[string]bool{}
	schemaLeaves(cfg, "", defs, schemaKeys)

	for k := range goKeys {
		if !schemaKeys[k] && !chartOwnedKeys[k] {
			t.Errorf("config key %s is not in charts/idemgate/values.schema.json (properties.config): add it, so that chart users can set it", k)
		}
	}
	for k := range schemaKeys {
		if !goKeys[k] {
			t.Errorf("values.schema.json allows config key %s, which idemgate does not know", k)
		}
	}
	for k := range chartOwnedKeys {
		if schemaKeys[k] {
			t.Errorf("values.schema.json allows %s, which the chart sets itself", k)
		}
		if !goKeys[k] {
			t.Errorf("chart-owned key %s is gone from the config package: update the chart", k)
		}
	}
}

// configKeys parses the config package and returns the dotted paths of the
// leaf keys under type Config ("routes[].rate_limit.per").
func configKeys(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	structs := map[string]*ast.StructType{}
	for _, f := range matches {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	root, ok := structs["Config"]
	if !ok {
		t.Fatalf("no type Config in %s", dir)
	}
	keys := map[string]bool{}
	var walk func(st *ast.StructType, prefix string, depth int)
	walk = func(st *ast.StructType, prefix string, depth int) {
		if depth > 10 {
			t.Fatalf("config types nest deeper than 10 at %s", prefix)
		}
		for _, f := range st.Fields.List {
			if f.Tag == nil {
				continue
			}
			tag, _ := strconv.Unquote(f.Tag.Value)
			name, _, _ := strings.Cut(reflect.StructTag(tag).Get("mapstructure"), ",")
			if name == "" || name == "-" {
				continue
			}
			for _, id := range f.Names {
				if !id.IsExported() {
					name = ""
				}
			}
			if name == "" {
				continue
			}
			path := prefix + name
			typ := f.Type
			suffix := ""
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			if arr, ok := typ.(*ast.ArrayType); ok {
				typ, suffix = arr.Elt, "[]"
			}
			if id, ok := typ.(*ast.Ident); ok && structs[id.Name] != nil {
				walk(structs[id.Name], path+suffix+".", depth+1)
				continue
			}
			keys[path] = true
		}
	}
	walk(root, "", 0)
	return keys
}

// schemaLeaves collects the dotted paths of the leaf properties of a JSON
// schema object, following $ref into defs, array items ("[]") and the
// object alternatives of oneOf/anyOf.
func schemaLeaves(s map[string]any, prefix string, defs map[string]any, out map[string]bool) {
	if ref, ok := s["$ref"].(string); ok {
		if d, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any); ok {
			schemaLeaves(d, prefix, defs, out)
			return
		}
	}
	for _, alt := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[alt].([]any); ok {
			for _, a := range alts {
				if am, ok := a.(map[string]any); ok && am["properties"] != nil {
					schemaLeaves(am, prefix, defs, out)
				}
			}
			return
		}
	}
	if items, ok := s["items"].(map[string]any); ok && items["properties"] != nil {
		schemaLeaves(items, strings.TrimSuffix(prefix, ".")+"[].", defs, out)
		return
	}
	props, ok := s["properties"].(map[string]any)
	if !ok {
		out[strings.TrimSuffix(prefix, ".")] = true
		return
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		schemaLeaves(props[n].(map[string]any), prefix+n+".", defs, out)
	}
}
