package clientaddr_test

import (
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/clientaddr"
)

func TestStripHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"X-Real-Ip":           {"1.2.3.4"},
		"True-Client-Ip":      {"1.2.3.4"},
		"Forwarded":           {"for=1.2.3.4"},
		"X-Forwarded-For":     {"1.2.3.4"},
		"X-Forwarded-Host":    {"evil"},
		"X-Forwarded-Proto":   {"https"},
		"X-Forwarded-Port":    {"443"},
		"X-Forwarded-Prefix":  {"/admin"},
		"x-forwarded-for":     {"non-canonical"},
		"X-Client-Ip":         {"1.2.3.4"},
		"X-Cluster-Client-Ip": {"1.2.3.4"},
		"Cf-Connecting-Ip":    {"1.2.3.4"},
		"Fastly-Client-Ip":    {"1.2.3.4"},
		"x-real-ip":           {"non-canonical"},
		// Spellings WSGI and CGI fold into the same variables:
		"X_Real_Ip":         {"1.2.3.4"},
		"X_forwarded_for":   {"1.2.3.4"},
		"True_Client_IP":    {"1.2.3.4"},
		"X-Forwarded_Proto": {"https"},
		"FORWARDED":         {"for=1.2.3.4"},
		"x_forwarded_host":  {"evil"},
		// Kept:
		"X-Forwarded":     {"not the family"},
		"X-Forward-For":   {"misspelt"},
		"Idempotency-Key": {"k"},
		"X-Real-Ip-Note":  {"other"},
		"X_Real_Ip_Note":  {"other"},
		"Content-Type":    {"application/json"},
	}
	if n := clientaddr.StripHeaders(h); n != 20 {
		t.Errorf("removed %d; want 20", n)
	}
	var kept []string
	for k := range h {
		kept = append(kept, k)
	}
	slices.Sort(kept)
	want := []string{"Content-Type", "Idempotency-Key", "X-Forward-For", "X-Forwarded", "X-Real-Ip-Note", "X_Real_Ip_Note"}
	if !slices.Equal(kept, want) {
		t.Errorf("kept %q; want %q", kept, want)
	}
	if n := clientaddr.StripHeaders(nil); n != 0 {
		t.Errorf("nil map: %d", n)
	}
}

// A trusted peer's own headers stay; the "_" spellings, a client's passed
// through, go.
func TestStripFoldedHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{
		"X-Real-Ip": {"1"}, "X-Forwarded-For": {"1"}, "Forwarded": {"for=1"},
		"X_Real_Ip": {"2"}, "X-Forwarded_For": {"2"}, "true_client_ip": {"2"}, "X_Custom_Header": {"k"},
	}
	if n := clientaddr.StripFoldedHeaders(h); n != 3 {
		t.Errorf("removed %d; want 3", n)
	}
	kept := slices.Sorted(maps.Keys(h))
	if want := []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip", "X_Custom_Header"}; !slices.Equal(kept, want) {
		t.Errorf("kept %q; want %q", kept, want)
	}
}

func TestTrusted(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	for _, tc := range []struct {
		peer string
		want bool
	}{
		{"10.1.2.3", true},
		{"::ffff:10.1.2.3", true},
		{"fd00::1%eth0", true},
		{"192.0.2.1", false},
		{"2001:db8::1", false},
	} {
		if got := clientaddr.Trusted(netip.MustParseAddr(tc.peer), trusted); got != tc.want {
			t.Errorf("Trusted(%s) = %v; want %v", tc.peer, got, tc.want)
		}
	}
	if clientaddr.Trusted(netip.Addr{}, trusted) {
		t.Error("invalid peer trusted")
	}
	if clientaddr.Trusted(netip.MustParseAddr("10.0.0.1"), nil) {
		t.Error("trusted with no prefixes")
	}
}

func TestStripAllocs(t *testing.T) {
	h := http.Header{"X-Real-Ip": {"1"}, "Content-Type": {"a"}, "Accept": {"b"}}
	if a := testing.AllocsPerRun(100, func() {
		h["X-Real-Ip"] = nil
		clientaddr.StripHeaders(h)
	}); a != 0 {
		t.Errorf("allocs = %v; want 0", a)
	}
}

// Every client-address header, in every spelling, is stripped, and other
// headers are not, whatever their first byte (StripHeaders passes over most
// names at their first byte).
func TestStripHeadersEverySpelling(t *testing.T) {
	names := []string{
		"X-Real-Ip", "True-Client-Ip", "Forwarded", "X-Client-Ip", "X-Cluster-Client-Ip",
		"Cf-Connecting-Ip", "Fastly-Client-Ip", "X-Forwarded-For", "X-Forwarded-Anything",
	}
	for _, name := range names {
		for _, k := range []string{name, strings.ToLower(name), strings.ToUpper(name), strings.ReplaceAll(name, "-", "_")} {
			if n := clientaddr.StripHeaders(map[string][]string{k: {"1.2.3.4"}}); n != 1 {
				t.Errorf("StripHeaders removed %d of {%q}; want 1", n, k)
			}
		}
	}
	for _, k := range []string{"", "Accept", "Content-Type", "X-Request-Id", "Traceparent", "Forwarded-X", "Cf-Ray", "X-Forwarded", "Fastly-Debug"} {
		if n := clientaddr.StripHeaders(map[string][]string{k: {"1.2.3.4"}}); n != 0 {
			t.Errorf("StripHeaders removed %d of {%q}; want 0", n, k)
		}
	}
}

// BenchmarkStripHeaders strips a keyed write's headers, as a client sends
// them: none is a client-address header.
func BenchmarkStripHeaders(b *testing.B) {
	h := map[string][]string{
		"Accept": {"*/*"}, "User-Agent": {"Stripe/v1 GoBindings/82.1.0"}, "Authorization": {"Bearer sk_test"},
		"Content-Type": {"application/json"}, "Content-Length": {"82"}, "Idempotency-Key": {"k-1"},
		"Stripe-Version": {"2025-01-27"}, "X-Request-Id": {"abc-1"},
	}
	b.ReportAllocs()
	for b.Loop() {
		if n := clientaddr.StripHeaders(h); n != 0 {
			b.Fatalf("stripped %d", n)
		}
	}
}
