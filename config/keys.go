package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// checkDocument walks the YAML document against [Config]'s keys before
// viper reads it, because viper cannot tell what it was given: it folds the
// case of keys (Routes: and ADMIN_LISTEN: would be accepted, though the
// chart's schema refuses them) and decodes weakly (replay_header: 5 would
// become "5", addrs: a:6379 a one-item list). It returns one [*FieldError]
// per problem:
//
//   - a key that is not one of its section's, exactly: [ErrUnknownKey],
//     with a did-you-mean for a key spelt in another case or nearly right
//     (the rule of [UnknownEnv]);
//   - a value of the wrong kind: [ErrDecode]; a section written as a
//     scalar or a list, a list written as a scalar or a map (routes: as a
//     map of names to routes), a scalar written as a list or a map, a
//     number or boolean where a string belongs (quote it), a string where a
//     number or a boolean belongs.
//
// Null values are left to the decoder (they keep the default). Durations are
// checked by the decoder, which words a bare number better.
func checkDocument(doc *yaml.Node) []*FieldError {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	var out []*FieldError
	walkNode(doc.Content[0], reflect.TypeFor[Config](), "", &out)
	return out
}

// walkNode checks n, the value of key, against the Go type t.
func walkNode(n *yaml.Node, t reflect.Type, key string, out *[]*FieldError) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	bad := func(want string) {
		*out = append(*out, &FieldError{Key: key, Msg: nodeWords(n) + " is not " + want, Err: ErrDecode})
	}
	switch {
	case t == durationType:
		if n.Kind != yaml.ScalarNode {
			bad("a duration (write a number with a unit, like \"30s\")")
		}
		return
	case t == sessionType && n.Kind == yaml.ScalarNode:
		if n.Tag != "!!str" {
			bad("a path parameter's name or a section of keys (quote it)")
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			bad("a section of keys")
			return
		}
		fields := structKeys(t)
		eachPair(n, func(k, v *yaml.Node) {
			name := k.Value
			f, ok := fields[name]
			if !ok {
				*out = append(*out, unknownKey(joinKey(key, name), name, fields))
				return
			}
			walkNode(v, f.Type, joinKey(key, name), out)
		})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			bad("a map of names to values")
			return
		}
		eachPair(n, func(k, v *yaml.Node) {
			walkNode(v, t.Elem(), joinKey(key, k.Value), out)
		})
	case reflect.Slice:
		switch {
		case n.Kind == yaml.SequenceNode:
			for i, item := range n.Content {
				walkNode(item, t.Elem(), fmt.Sprintf("%s[%d]", key, i), out)
			}
		case t.Elem().Kind() == reflect.Struct:
			// routes: written as a map of names to routes, or as a name.
			*out = append(*out, &FieldError{Key: key, Err: ErrDecode, Msg: nodeWords(n) +
				" is not a list: write each entry as a list item, starting with \"- \" (- name: create_order)"})
		case n.Kind == yaml.ScalarNode:
			bad("a list (write [" + exampleItem(n) + "])")
		default:
			bad("a list")
		}
	case reflect.String:
		switch {
		case n.Kind != yaml.ScalarNode:
			bad("a string")
		case n.Tag != "!!str":
			*out = append(*out, &FieldError{Key: key, Err: ErrDecode,
				Msg: fmt.Sprintf("%s is not a string (quote it: %q)", n.Value, n.Value)})
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			bad("a boolean (true or false)")
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// A whole float (1e6) is the decoder's to accept; it refuses 1.5.
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" {
			bad("a whole number")
		}
	case reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" {
			bad("a number")
		}
	}
}

// eachPair calls f with each key and value of the mapping node n, merge
// keys (<<: *anchor) expanded.
func eachPair(n *yaml.Node, f func(k, v *yaml.Node)) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Tag == "!!merge" {
			for v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			switch v.Kind {
			case yaml.MappingNode:
				eachPair(v, f)
			case yaml.SequenceNode:
				for _, m := range v.Content {
					for m.Kind == yaml.AliasNode && m.Alias != nil {
						m = m.Alias
					}
					if m.Kind == yaml.MappingNode {
						eachPair(m, f)
					}
				}
			}
			continue
		}
		f(k, v)
	}
}

// structKeys are the keys of the struct type t (its mapstructure tags).
func structKeys(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name != "" && name != "-" && f.IsExported() {
			out[name] = f
		}
	}
	return out
}

// unknownKey is the error for name, a key of no field in fields, with the
// key it most likely misspells.
func unknownKey(key, name string, fields map[string]reflect.StructField) *FieldError {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	msg := "unknown key"
	if n := nearestKey(name, names); n != "" {
		if strings.EqualFold(n, name) {
			msg += "; keys are case-sensitive: did you mean " + n + "?"
		} else {
			msg += "; did you mean " + n + "?"
		}
	}
	return &FieldError{Key: key, Msg: msg, Err: ErrUnknownKey}
}

// nodeWords names what n is, for the operator: "a list", "a map", "5",
// "\"yes\"".
func nodeWords(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a map"
	}
	if n.Tag == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// exampleItem is the scalar n's value as a list item, for a hint.
func exampleItem(n *yaml.Node) string {
	if n.Tag == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}
