package clientaddr_test

import (
	"maps"
	"net/http"
	"net/netip"
	"slices"
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
