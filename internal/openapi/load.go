package openapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
)

// Spec is a loaded API description: an OpenAPI 3 document with every $ref
// resolved (a Swagger 2.0 document is converted first).
type Spec struct {
	// Doc is the resolved document.
	Doc *openapi3.T
	// Version is the document's own version line: "Swagger 2.0",
	// "OpenAPI 3.0.4", "OpenAPI 3.1.1".
	Version string
	// Path is the file it came from.
	Path string
}

// maxSpecBytes bounds the document read: the largest public descriptions
// (GitHub's, Stripe's) are under 20 MB.
const maxSpecBytes = 64 << 20

// LoadSpec reads an OpenAPI 3.0/3.1 or Swagger 2.0 document from a local
// file, in YAML or JSON, and resolves its $refs. External $refs may name
// other local files (relative to the document); URLs are refused. Its error
// is one line, naming the file.
func LoadSpec(path string) (spec *Spec, err error) {
	defer func() {
		// kin-openapi is fuzzed, but a document it cannot handle must be an
		// error line, never a crash of the command.
		if r := recover(); r != nil {
			spec, err = nil, fmt.Errorf("%s: the OpenAPI parser failed on this document: %v", path, r)
		}
	}()
	data, err := readLimited(path)
	if err != nil {
		return nil, err
	}
	// Only what routes need goes on to kin-openapi (slim.go): the
	// schemas, responses and examples of a large document would be most
	// of its memory and time.
	slim, err := slimDocument(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a YAML or JSON document: %v", path, oneLine(err))
	}
	data = nil
	var head struct{ OpenAPI, Swagger any }
	head.OpenAPI, head.Swagger = slim["openapi"], slim["swagger"]
	if data, err = json.Marshal(slim); err != nil {
		return nil, fmt.Errorf("%s: %v", path, oneLine(err))
	}
	slim = nil
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	location := &url.URL{Path: filepath.ToSlash(abs)}
	loader := openapi3.NewLoader()
	loader.Context = context.Background()
	loader.ReadFromURIFunc = localFilesOnly
	var doc *openapi3.T
	var version string
	switch {
	case head.OpenAPI != nil && head.Swagger != nil:
		return nil, fmt.Errorf("%s: has both \"openapi\" and \"swagger\"; want one", path)
	case head.Swagger != nil:
		v := fmt.Sprint(head.Swagger)
		if v != "2.0" {
			return nil, fmt.Errorf("%s: swagger version %q is not supported; want \"2.0\", or OpenAPI 3.0/3.1", path, v)
		}
		var doc2 openapi2.T
		if err := openapi2.UnmarshalFromData(data, &doc2); err != nil {
			return nil, fmt.Errorf("%s: %v", path, oneLine(err))
		}
		if doc, err = openapi2conv.ToV3WithLoader(&doc2, loader, location); err != nil {
			return nil, fmt.Errorf("%s: %v", path, oneLine(err))
		}
		version = "Swagger 2.0"
	case head.OpenAPI != nil:
		v, _ := head.OpenAPI.(string)
		if !strings.HasPrefix(v, "3.0") && !strings.HasPrefix(v, "3.1") {
			return nil, fmt.Errorf("%s: openapi version %q is not supported; want 3.0.x or 3.1.x (or swagger 2.0)", path, fmt.Sprint(head.OpenAPI))
		}
		if doc, err = loader.LoadFromDataWithPath(data, location); err != nil {
			return nil, fmt.Errorf("%s: %v", path, oneLine(err))
		}
		version = "OpenAPI " + v
	default:
		return nil, fmt.Errorf("%s: neither \"openapi\" (3.0, 3.1) nor \"swagger\" (2.0) is set; not an API description", path)
	}
	if doc.Paths == nil || doc.Paths.Len() == 0 {
		return nil, fmt.Errorf("%s: the document has no paths", path)
	}
	if err := checkResolved(doc); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return &Spec{Doc: doc, Version: version, Path: path}, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > maxSpecBytes {
		return nil, fmt.Errorf("%s: %d bytes; the limit is %d", path, st.Size(), maxSpecBytes)
	}
	return os.ReadFile(path)
}

// localFilesOnly reads external $refs from local files only: an API
// description must not make the importer fetch URLs.
func localFilesOnly(loader *openapi3.Loader, location *url.URL) ([]byte, error) {
	if location.Scheme != "" && location.Scheme != "file" || location.Host != "" {
		return nil, fmt.Errorf("$ref %q: only local files are read, not URLs", location.String())
	}
	return readLimited(filepath.FromSlash(location.Path))
}

// checkResolved reports the first path item, operation, parameter or
// request body whose $ref was left unresolved (kin-openapi leaves a $ref
// cycle with a nil value).
func checkResolved(doc *openapi3.T) error {
	for _, p := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(p)
		ptr := "#/paths/" + escapePointer(p)
		if item == nil {
			return fmt.Errorf("%s: path item is empty or its $ref does not resolve", ptr)
		}
		if item.Ref != "" && len(item.Operations()) == 0 {
			return fmt.Errorf("%s: $ref %q resolves to no operations (a $ref cycle?)", ptr, item.Ref)
		}
		for _, prm := range item.Parameters {
			if prm == nil || prm.Value == nil {
				return fmt.Errorf("%s/parameters: a $ref does not resolve (%s)", ptr, refOf(prm))
			}
		}
		for m, op := range item.Operations() {
			optr := ptr + "/" + strings.ToLower(m)
			for _, prm := range op.Parameters {
				if prm == nil || prm.Value == nil {
					return fmt.Errorf("%s/parameters: a $ref does not resolve (%s)", optr, refOf(prm))
				}
			}
			if op.RequestBody != nil && op.RequestBody.Value == nil {
				return fmt.Errorf("%s/requestBody: $ref %q does not resolve", optr, op.RequestBody.Ref)
			}
		}
	}
	return nil
}

func refOf(p *openapi3.ParameterRef) string {
	if p == nil {
		return "null"
	}
	return p.Ref
}

// escapePointer escapes one JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// oneLine joins a multi-line error message into one line.
func oneLine(err error) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimSpace(err.Error()), "\n") {
		if l = strings.TrimSpace(l); l == "" {
			continue
		}
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(l)
	}
	return b.String()
}
