package gql_test

import (
	"encoding/json"
	"math"
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/gql"
)

// defaultRelease is DESIGN.md's default release_statuses.
func defaultRelease(status int) bool {
	return slices.Contains([]int{400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 425, 429, 503}, status)
}

func TestReleaseOnAnswer(t *testing.T) {
	t.Parallel()
	one := body(`mutation { pay(id: 1) { ok } }`)
	aliased := body(`mutation { p: pay(id: 1) { ok } __typename }`)
	two := body(`mutation { a: pay(id: 1) { ok } b: pay(id: 2) { ok } }`)
	query := body(`query { order(id: 1) { id } }`)
	unknown := body(`mutation { pay(`)
	tests := []struct {
		name    string
		req     string
		status  int
		release func(int) bool
		answer  string
		want    bool
	}{
		{"success", one, 200, defaultRelease, `{"data":{"pay":{"ok":true}}}`, false},
		{"release status", one, 422, defaultRelease, `{"data":{"pay":{"ok":true}}}`, true},
		{"release status with any body", one, 429, defaultRelease, `rate limited`, true},
		{"status not released with nil func", one, 422, nil, `{"data":{"pay":{"ok":true}}}`, false},
		{"no data: validation error", one, 200, defaultRelease, `{"errors":[{"message":"Cannot query field"}]}`, true},
		{"no data: 400 not in release statuses", one, 400, nil, `{"errors":[{"message":"syntax"}]}`, true},
		{"no data on an unparsable document", unknown, 200, defaultRelease, `{"errors":[{"message":"Syntax Error"}]}`, true},
		{"no data on a query", query, 200, defaultRelease, `{"errors":[{"message":"x"}]}`, true},
		{"no data but 5xx", one, 500, defaultRelease, `{"errors":[{"message":"Internal server error"}]}`, false},
		{"no data, no errors", one, 200, defaultRelease, `{"extensions":{}}`, false},
		{"no data, empty errors", one, 200, defaultRelease, `{"errors":[]}`, false},
		{"no data, errors not an array", one, 200, defaultRelease, `{"errors":{"message":"x"}}`, false},
		{"no data, errors of the wrong shape", one, 200, defaultRelease, `{"errors":[1]}`, false},
		{"data null", one, 200, defaultRelease, `{"data":null,"errors":[{"message":"boom","path":["pay"]}]}`, false},
		{"single mutation failed", one, 200, defaultRelease, `{"errors":[{"message":"declined","path":["pay"]}],"data":{"pay":null}}`, true},
		{"single mutation failed, but 500", one, 500, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"declined","path":["pay"]}]}`, false},
		{"single mutation failed, 4xx not in release statuses", one, 402, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"declined","path":["pay"]}]}`, true},
		{"release status 503", one, 503, defaultRelease, `{"data":{"pay":{"ok":true}}}`, true},
		{"single aliased mutation failed", aliased, 200, defaultRelease, `{"data":{"p":null,"__typename":"Mutation"},"errors":[{"message":"declined","path":["p"]}]}`, true},
		{"single mutation failed deeper", one, 200, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"x","path":["pay","ok"]}]}`, true},
		{"single mutation null without an error for it", one, 200, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"x","path":["other"]}]}`, false},
		{"single mutation null, error without path", one, 200, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"x"}]}`, false},
		{"single mutation null, numeric path", one, 200, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"x","path":[0]}]}`, false},
		{"single mutation null, no errors", one, 200, defaultRelease, `{"data":{"pay":null}}`, false},
		{"partial success", one, 200, defaultRelease, `{"data":{"pay":{"ok":null}},"errors":[{"message":"x","path":["pay","ok"]}]}`, false},
		{"single mutation missing from data", one, 200, defaultRelease, `{"data":{"other":null},"errors":[{"message":"x","path":["pay"]}]}`, false},
		{"empty data with errors", two, 200, defaultRelease, `{"errors":[{"message":"could not unmarshal"}],"data":{}}`, true},
		{"empty data without errors", two, 200, defaultRelease, `{"data":{}}`, false},
		{"empty data with errors, but 500", one, 500, defaultRelease, `{"errors":[{"message":"x"}],"data":{}}`, false},
		{"data not an object", one, 200, defaultRelease, `{"data":[],"errors":[{"message":"x","path":["pay"]}]}`, false},
		{"two mutations, one failed", two, 200, defaultRelease, `{"data":{"a":{"ok":true},"b":null},"errors":[{"message":"x","path":["b"]}]}`, false},
		{"two mutations, both failed", two, 200, defaultRelease, `{"data":{"a":null,"b":null},"errors":[{"message":"x","path":["a"]},{"message":"x","path":["b"]}]}`, false},
		{"query with a null field", query, 200, defaultRelease, `{"data":{"order":null},"errors":[{"message":"x","path":["order"]}]}`, false},
		{"unknown kind with a null field", unknown, 200, defaultRelease, `{"data":{"pay":null},"errors":[{"message":"x","path":["pay"]}]}`, false},
		{"not JSON", one, 502, defaultRelease, `<html>Bad Gateway</html>`, false},
		{"empty body", one, 200, defaultRelease, ``, false},
		{"truncated", one, 200, defaultRelease, `{"errors":[{"message":"x"}`, false},
		{"JSON null", one, 200, defaultRelease, `null`, false},
		{"JSON array", one, 200, defaultRelease, `[{"errors":[{"message":"x"}]}]`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := mustParse(t, jsonCT, tc.req)
			if got := gql.ReleaseOnAnswer(req, tc.status, tc.release, []byte(tc.answer)); got != tc.want {
				t.Errorf("ReleaseOnAnswer(%s, %d, %s) = %v; want %v", tc.req, tc.status, tc.answer, got, tc.want)
			}
		})
	}
}

func TestErrorBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		message, code string
		extra         map[string]any
		want          string
	}{
		{"plain", "Idempotency-Key is not valid", "idempotency_key_invalid", nil,
			`{"errors":[{"message":"Idempotency-Key is not valid","extensions":{"code":"idempotency_key_invalid"}}]}`},
		{"extra sorted", "A request with this key is still running", "idempotency_in_progress",
			map[string]any{"request_id": "r-1", "retry_after": 2, "a": true},
			`{"errors":[{"message":"A request with this key is still running","extensions":{"a":true,"code":"idempotency_in_progress","request_id":"r-1","retry_after":2}}]}`},
		{"code wins over extra", "m", "session_busy", map[string]any{"code": "other"},
			`{"errors":[{"message":"m","extensions":{"code":"session_busy"}}]}`},
		{"unencodable extra dropped", "m", "overloaded", map[string]any{"x": math.Inf(1)},
			`{"errors":[{"message":"m","extensions":{"code":"overloaded"}}]}`},
		{"escaping", "say \"hi\"\n<b>", "rate_limited", nil,
			`{"errors":[{"message":"say \"hi\"\n\u003cb\u003e","extensions":{"code":"rate_limited"}}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 3 { // map order must not leak into the output
				if got := string(gql.ErrorBody(tc.message, tc.code, tc.extra)); got != tc.want {
					t.Fatalf("ErrorBody() = %s; want %s", got, tc.want)
				}
			}
			var v struct {
				Errors []struct {
					Message    string
					Extensions map[string]any
				}
			}
			if err := json.Unmarshal(gql.ErrorBody(tc.message, tc.code, tc.extra), &v); err != nil || len(v.Errors) != 1 || v.Errors[0].Message != tc.message || v.Errors[0].Extensions["code"] != tc.code {
				t.Errorf("ErrorBody() decodes to %+v, %v; want one error %q with code %q", v, err, tc.message, tc.code)
			}
		})
	}
}
