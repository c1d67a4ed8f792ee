package keystore

import (
	"encoding/hex"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// Store keys must stay byte-identical across releases for unchanged inputs
// (DESIGN.md, Fingerprint → Upgrades): a retry that spans an upgrade must
// find its record. These values were recorded from the first release's
// NewKey; the part lists have the shape of proxy.ScopeKey's.
func TestNewKeyFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		parts []string
		want  string
	}{
		{[]string{"v1", "shop", "k-123"}, "72c8d90729e39c56544795cea8d79a75c37010c91f371ccc0460c88bf7c7f117"},
		{[]string{"v1", "", "1", "Bearer abc", "order-7"}, "1a29fee9030f4af6ac19acd878d7afa0a28ef402c41f8478fa05d0b27caca871"},
		{[]string{"v1", "tenant-a", "0", "2", "x", "y", "key"}, "cc507bb702c19c52bae44ec87c901bf3d0c8792eb5bcfa0ddc50eeec93b7710a"},
		{[]string{"v1", strings.Repeat("a", 600), "k"}, "52400d805f107e99b13fc27a03cf6343d3980fcc4525bab71840996e52667a06"},
		{nil, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	} {
		if got := NewKey(tc.parts...).String(); got != tc.want {
			t.Errorf("NewKey(%q) = %s; want %s (store keys must not change across releases)", tc.parts, got, tc.want)
		}
	}
}

// Answers stored by the first release must still decode.
func TestDecodeResponseFixtures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hex  string
		want *Response
	}{
		{"full", "01069203030c436f6e74656e742d5479706501106170706c69636174696f6e2f6a736f6e0a5365742d436f6f6b69650203623d3203613d3107582d456d70747901007b226964223a377d",
			&Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"b=2", "a=1"}, "X-Empty": {""}}, Body: []byte(`{"id":7}`)}},
		{"too large", "0101900300", &Response{Status: 200, TooLarge: true}},
		{"no header, no body", "0100980300", &Response{Status: 204}},
	} {
		b, err := hex.DecodeString(tc.hex)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeResponse(b)
		if err != nil {
			t.Errorf("%s: DecodeResponse = %v", tc.name, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: DecodeResponse = %#v; want %#v", tc.name, got, tc.want)
		}
		if enc := hex.EncodeToString(EncodeResponse(tc.want)); enc != tc.hex {
			t.Errorf("%s: EncodeResponse = %s; want the first release's %s", tc.name, enc, tc.hex)
		}
	}
}
