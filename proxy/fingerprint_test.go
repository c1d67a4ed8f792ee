package proxy

import (
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
)

func TestFingerprint(t *testing.T) {
	t.Parallel()
	ptr, err := canonjson.ParsePointer("/meta/sent_at")
	if err != nil {
		t.Fatal(err)
	}
	base := fingerprint("r", "POST", "/carts/a", "x=1", "application/json", []byte(`{"a":1,"b":[1,2]}`), nil)
	tests := []struct {
		name                   string
		route, method, path, q string
		ct, body               string
		ignore                 []canonjson.Pointer
		same                   bool
	}{
		{"identical", "r", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, true},
		{"key order and space", "r", "POST", "/carts/a", "x=1", "application/json", "{ \"b\": [1, 2],\n\"a\": 1}", nil, true},
		{"+json type", "r", "POST", "/carts/a", "x=1", "application/vnd.api+json", `{"b":[1,2],"a":1}`, nil, true},
		{"escapes", "r", "POST", "/carts/a", "x=1", "application/json", `{"\u0061":1,"b":[1,2]}`, nil, true},
		{"array order", "r", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[2,1]}`, nil, false},
		{"number literal", "r", "POST", "/carts/a", "x=1", "application/json", `{"a":1.0,"b":[1,2]}`, nil, false},
		{"ignored member", "r", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2],"meta":{"sent_at":"now"}}`, []canonjson.Pointer{ptr}, false},
		{"route", "s", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"method", "r", "PUT", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"path case", "r", "POST", "/carts/A", "x=1", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"query", "r", "POST", "/carts/a", "x=2", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
		{"text is raw", "r", "POST", "/carts/a", "x=1", "text/plain", `{"b":[1,2],"a":1}`, nil, false},
		{"invalid json is raw", "r", "POST", "/carts/a", "x=1", "application/json", `{"a":1,"b":[1,2]`, nil, false},
		{"field boundary", "r", "POST", "/carts/ax=1", "", "application/json", `{"a":1,"b":[1,2]}`, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := fingerprint(tc.route, tc.method, tc.path, tc.q, tc.ct, []byte(tc.body), tc.ignore)
			if (got == base) != tc.same {
				t.Errorf("same fingerprint = %v; want %v", got == base, tc.same)
			}
		})
	}
	a := fingerprint("r", "POST", "/p", "", "application/json", []byte(`{"a":1,"meta":{"sent_at":"1"}}`), []canonjson.Pointer{ptr})
	b := fingerprint("r", "POST", "/p", "", "application/json", []byte(`{"meta":{"sent_at":"2"},"a":1}`), []canonjson.Pointer{ptr})
	if a != b {
		t.Errorf("bodies differing in an ignored member have different fingerprints")
	}
}
