package gql

import "encoding/json"

// ReleaseOnAnswer reports whether the upstream's answer to req proves that
// nothing ran, so that its Idempotency-Key is released instead of the answer
// being stored (issue #10). It releases when:
//
//  1. status is one of the route's release statuses (releaseStatuses
//     reports it; nil means none), as on every route; or
//  2. status is below 500 and the body is a JSON object with no "data"
//     member and a non-empty "errors" array: the request was refused before
//     execution (a syntax or validation error, a missing scope, a persisted
//     query the server does not know). "data": null is not this case:
//     execution started; or
//  3. status is below 500, the body has a non-empty "errors" array, and
//     "data" is {}: every top-level field that runs has its response key
//     in data (null when it failed), so none ran. Some servers answer
//     errors in coercing the variables this way (graph-gophers/graphql-go);
//     or
//  4. status is below 500, req is a mutation with exactly one top-level
//     field ([Operation.Fields]), its value in data is null, and an error's
//     path starts with that field's response key: the only mutation failed.
//
// Otherwise it keeps the key and the answer is stored: success, partial
// success, several mutations with an error, "data": null, a body that is not
// JSON or not a GraphQL response, a truncated body. An unknown outcome is
// not proof. A 5xx answer that release_statuses does not list is always
// kept, whatever its body: servers also answer 500 with errors and no data
// when they fail after execution (a response hook that throws, a gateway's
// error page), and the GraphQL-over-HTTP spec gives execution results a 2xx
// status.
//
// body must be the whole answer, uncompressed; ReleaseOnAnswer neither
// retains nor modifies it.
func ReleaseOnAnswer(req Request, status int, releaseStatuses func(int) bool, body []byte) bool {
	if releaseStatuses != nil && releaseStatuses(status) {
		return true
	}
	if status >= 500 {
		return false // see above: a server error is no proof, whatever the body
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil || top == nil {
		return false
	}
	data, hasData := top["data"]
	errs, ok := decodeErrors(top["errors"])
	if !ok || len(errs) == 0 {
		return false
	}
	if !hasData {
		return true
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(data, &fields) != nil || fields == nil {
		return false // "data": null, or not an object
	}
	if len(fields) == 0 {
		return true // no top-level field ran (see rule 3)
	}
	op := req.Operation()
	if op.Kind != KindMutation || len(op.Fields) != 1 {
		return false
	}
	key := op.Fields[0]
	if v, ok := fields[key]; !ok || !isNull(v) {
		return false
	}
	for _, e := range errs {
		if len(e.Path) == 0 {
			continue
		}
		var first string
		if json.Unmarshal(e.Path[0], &first) == nil && first == key {
			return true
		}
	}
	return false
}

type responseError struct {
	Path []json.RawMessage `json:"path"`
}

// decodeErrors decodes a response's "errors" member; ok is false when it is
// absent or not an array of objects.
func decodeErrors(raw json.RawMessage) (errs []responseError, ok bool) {
	if raw == nil || raw[0] != '[' {
		return nil, false
	}
	if json.Unmarshal(raw, &errs) != nil {
		return nil, false
	}
	return errs, true
}
