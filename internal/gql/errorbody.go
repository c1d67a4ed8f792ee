package gql

import "encoding/json"

// ContentType is the media type of [ErrorBody]'s output. It is the
// GraphQL-over-HTTP spec's legacy type, which every GraphQL client reads.
const ContentType = "application/json"

// ErrorBody returns the body of one of idemgate's own answers on a GraphQL
// route (DESIGN.md: "idemgate's own errors on such a route are
// GraphQL-shaped"):
//
//	{"errors":[{"message":"…","extensions":{"code":"…",…}}]}
//
// code is one of DESIGN.md's error codes (idempotency_in_progress, ...); the
// HTTP status stays the one that table gives. extra holds further members of
// extensions, such as the request ID; its "code" member, if any, is
// overridden by code. The output is deterministic (members of extensions
// sorted by name, no trailing newline), and HTML-safe as encoding/json
// makes it. When extra cannot be encoded as JSON it is left out.
func ErrorBody(message, code string, extra map[string]any) []byte {
	ext := make(map[string]any, len(extra)+1)
	for k, v := range extra {
		ext[k] = v
	}
	ext["code"] = code
	b, err := marshalError(message, ext)
	if err != nil {
		b, _ = marshalError(message, map[string]any{"code": code}) // strings always encode
	}
	return b
}

func marshalError(message string, ext map[string]any) ([]byte, error) {
	type gqlError struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	}
	return json.Marshal(struct {
		Errors []gqlError `json:"errors"`
	}{[]gqlError{{message, ext}}})
}
