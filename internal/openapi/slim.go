package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// The importer reads little of an API description: the servers (or host
// and basePath), each path item's and operation's servers, parameters
// (their in, name and required), request body media types, callback and
// webhook names, operationId and the x-* extensions. Schemas, responses,
// examples and descriptions are most of a large document (Stripe's 8 MB
// OpenAPI document is mostly components.schemas), and resolving them is
// most of kin-openapi's work and memory: slimDocument drops them before
// kin-openapi sees the document, so that importing Stripe's description
// peaks at a fraction of the memory (BENCHMARKS.md, routes import).

// What the slims keep of each mapping they read (see [fields]).
var (
	// topFields: the document's top level.
	topFields = fields{
		"openapi": nil, "swagger": nil, "servers": nil, "host": nil, "basePath": nil,
		"schemes": nil, "consumes": nil, "produces": nil,
		"info":       slimInfo,
		"paths":      eachValue(pathItemFields.slim),
		"webhooks":   namesOnly,
		"parameters": eachValue(slimParameter), // Swagger 2's shared parameters
		"components": componentFields.slim,
	}
	// componentFields: the components that can be reached from what routes
	// read: $refs from parameters, request bodies and path items (3.1).
	componentFields = fields{
		"parameters":    eachValue(slimParameter),
		"requestBodies": eachValue(slimRequestBody),
		"pathItems":     eachValue(pathItemFields.slim),
	}
	// pathItemFields: a path item's $ref, servers, parameters and
	// operations.
	pathItemFields = fields{
		"$ref": nil, "servers": nil,
		"parameters": eachElem(slimParameter),
		"get":        operationFields.slim, "put": operationFields.slim, "post": operationFields.slim,
		"delete": operationFields.slim, "options": operationFields.slim, "head": operationFields.slim,
		"patch": operationFields.slim, "trace": operationFields.slim,
	}
	// operationFields: what the importer reads of an operation; callbacks
	// keep their names (the importer reports them), not their path items.
	operationFields = fields{
		"operationId": nil, "servers": nil, "consumes": nil,
		"parameters":  eachElem(slimParameter),
		"requestBody": slimRequestBody,
		"callbacks":   namesOnly,
	}
)

// fields says what a slim keeps of a mapping: the members it names, as
// they are (a nil func) or slimmed by their func, and the extensions (x-*).
type fields map[string]func(any) any

// keeps reports whether fs keeps the member k.
func (fs fields) keeps(k string) bool {
	_, ok := fs[k]
	return ok || strings.HasPrefix(k, "x-")
}

// slim returns what fs keeps of v when it is a mapping; anything else is
// left for kin-openapi to refuse.
func (fs fields) slim(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := map[string]any{}
	for k, val := range m {
		if !fs.keeps(k) {
			continue
		}
		if f := fs[k]; f != nil {
			val = f(val)
		}
		out[k] = val
	}
	return out
}

// eachValue slims each value of a mapping with f.
func eachValue(f func(any) any) func(any) any {
	return func(v any) any { return mapValues(v, f) }
}

// eachElem slims each element of a list with f.
func eachElem(f func(any) any) func(any) any {
	return func(v any) any { return listValues(v, f) }
}

// namesOnly keeps the names of a mapping's members, not their values.
func namesOnly(v any) any { return mapValues(v, func(any) any { return map[string]any{} }) }

// slimInfo keeps the title and version of the info object.
func slimInfo(v any) any {
	if m, ok := v.(map[string]any); ok {
		return pick(m, "title", "version")
	}
	return v
}

// slimDocument parses data (JSON or YAML) and returns the document with
// only what routes need, as JSON. A JSON document's components are decoded
// only in the parts kept, so its schemas are never built in memory.
func slimDocument(data []byte) (doc map[string]any, err error) {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) > 0 && t[0] == '{' {
		return slimJSON(data)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	top, ok := stringKeys(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the document is a %s, not a mapping", kindOf(v))
	}
	return slimTop(top), nil
}

// slimJSON decodes the top level of a JSON document and only the kept
// members of its components (OpenAPI 3) or top-level definitions (Swagger 2
// definitions and responses are skipped unparsed, as raw bytes).
func slimJSON(data []byte) (map[string]any, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	top := make(map[string]any, len(raw))
	for k, r := range raw {
		switch k {
		case "definitions", "responses", "securityDefinitions", "tags", "externalDocs":
			continue // Swagger 2 schemas and shared responses; docs
		case "components":
			var comps map[string]json.RawMessage
			if err := json.Unmarshal(r, &comps); err != nil {
				return nil, fmt.Errorf("components: %v", err)
			}
			kept := map[string]any{}
			for ck, cr := range comps {
				if !componentFields.keeps(ck) {
					continue
				}
				var v any
				if err := json.Unmarshal(cr, &v); err != nil {
					return nil, fmt.Errorf("components.%s: %v", ck, err)
				}
				kept[ck] = v
			}
			top[k] = kept
		default:
			var v any
			if err := json.Unmarshal(r, &v); err != nil {
				return nil, fmt.Errorf("%s: %v", k, err)
			}
			top[k] = v
		}
		raw[k] = nil // let the collector have it
	}
	return slimTop(top), nil
}

// slimTop keeps the top-level members routes need and slims their
// contents.
func slimTop(top map[string]any) map[string]any {
	return topFields.slim(top).(map[string]any)
}

// slimParameter keeps a parameter's identity ($ref, in, name, required)
// and extensions; its schema becomes the empty schema (a Swagger 2 body
// parameter needs one to convert).
func slimParameter(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := pick(m, "$ref", "in", "name", "required")
	copyExtensions(out, m)
	if _, ok := m["schema"]; ok {
		out["schema"] = map[string]any{}
	}
	if t, ok := m["type"]; ok { // Swagger 2 non-body parameters
		out["type"] = t
		if _, ok := m["items"]; ok {
			out["items"] = map[string]any{"type": "string"}
		}
	}
	if c, ok := m["content"]; ok {
		out["content"] = namesOnly(c)
	}
	return out
}

// slimRequestBody keeps a request body's $ref, required, extensions and
// media types (the importer reads their names), without their schemas.
func slimRequestBody(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := pick(m, "$ref", "required")
	copyExtensions(out, m)
	if c, ok := m["content"]; ok {
		out["content"] = namesOnly(c)
	}
	return out
}

// copyExtensions copies the x-* members of src into dst.
func copyExtensions(dst, src map[string]any) {
	for k, v := range src {
		if strings.HasPrefix(k, "x-") {
			dst[k] = v
		}
	}
}

// pick copies the members keys of m that are present.
func pick(m map[string]any, keys ...string) map[string]any {
	out := map[string]any{}
	for _, k := range keys {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// mapValues applies f to each value of v when it is a mapping; anything
// else is left for kin-openapi to refuse.
func mapValues(v any, f func(any) any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		out[k] = f(val)
	}
	return out
}

// listValues applies f to each element of v when it is a list.
func listValues(v any, f func(any) any) any {
	l, ok := v.([]any)
	if !ok {
		return v
	}
	out := make([]any, len(l))
	for i, val := range l {
		out[i] = f(val)
	}
	return out
}

// stringKeys turns YAML's mappings with non-string keys (a status code
// written 200) into map[string]any, as JSON has them.
func stringKeys(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			v[k] = stringKeys(val)
		}
		return v
	case map[any]any:
		out := make(map[string]any, len(v))
		for k, val := range v {
			out[fmt.Sprint(k)] = stringKeys(val)
		}
		return out
	case []any:
		for i, val := range v {
			v[i] = stringKeys(val)
		}
		return v
	}
	return v
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "empty document"
	case []any:
		return "list"
	default:
		return "scalar"
	}
}
