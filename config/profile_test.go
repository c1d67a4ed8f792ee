package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/modes"
)

// TestProfilePresets: a profile presets whole values; a key set explicitly,
// in the file or the environment, replaces the profile's value entirely.
func TestProfilePresets(t *testing.T) {
	stripe, err := Parse([]byte("profile: stripe\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := stripe.Idempotency
	if !slices.Equal(id.IdentitySources().Headers, []string{"Authorization", "Stripe-Account"}) || id.InProgress != modes.InProgressWait ||
		id.KeySyntax != modes.KeySyntaxPrintable || id.ReplayHeader != "Idempotent-Replayed" || stripe.RequestIDHeader != "Request-Id" ||
		stripe.Errors.Body != StripeErrorBody || stripe.Errors.Codes["idempotency_in_progress"] != "idempotency_key_in_use" {
		t.Errorf("profile stripe = %+v, errors %+v", id, stripe.Errors)
	}
	if !id.RequireIdentity || id.ReuseStatus != 409 {
		t.Errorf("profile stripe changed require_identity or reuse_status: %+v", id)
	}
	ietf, err := Parse([]byte("profile: ietf\n"))
	if err != nil {
		t.Fatal(err)
	}
	if ietf.Idempotency.KeySyntax != modes.KeySyntaxSFString || ietf.Idempotency.ReuseStatus != 422 || ietf.Errors.Body != IETFErrorBody ||
		!ietf.Idempotency.RequireIdentity || ietf.Idempotency.InProgress != modes.InProgressReject ||
		ietf.Idempotency.ReplayHeader != "Idempotency-Replayed" || !slices.Equal(ietf.Idempotency.ReleaseStatuses, []int{307, 308, 408, 425, 429, 503}) ||
		ietf.Errors.Codes["idempotency_key_reused"] != "fingerprint-mismatch" || ietf.Errors.Codes["idempotency_key_missing"] != "missing-key" {
		t.Errorf("profile ietf = %+v, errors %+v", ietf.Idempotency, ietf.Errors)
	}
	// The presets are copies: changing one Config's leaves the next alone.
	ietf.Idempotency.ReleaseStatuses[0], ietf.Errors.Codes["idempotency_key_reused"] = 999, "x"
	if again, _ := Parse([]byte("profile: ietf\n")); again.Idempotency.ReleaseStatuses[0] != 307 || again.Errors.Codes["idempotency_key_reused"] != "fingerprint-mismatch" {
		t.Errorf("profile ietf presets shared between configs: %v %v", again.Idempotency.ReleaseStatuses, again.Errors.Codes)
	}
	def, _ := Parse(nil)
	if d := Default(); def.Profile != ProfileDefault || def.Idempotency.KeySyntax != d.Idempotency.KeySyntax || def.Errors.Body != "" {
		t.Errorf("profile default = %+v", def.Idempotency)
	}

	// An explicit identity replaces the profile's whole identity: no
	// Authorization, no Stripe-Account merged in.
	c, err := Parse([]byte("profile: stripe\nidempotency:\n  identity: {cookies: [sid]}\n  allow_shared_accounts: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if src := c.Idempotency.IdentitySources(); len(src.Headers) != 0 || !slices.Equal(src.Cookies, []string{"sid"}) {
		t.Errorf("explicit identity under stripe = %+v; want the cookie alone", src)
	}
	if c.Idempotency.InProgress != modes.InProgressWait {
		t.Errorf("in_progress = %q; want the profile's wait (not set explicitly)", c.Idempotency.InProgress)
	}
	// An explicit errors section replaces the profile's shape whole.
	c, err = Parse([]byte("profile: stripe\nerrors: {codes: {rate_limited: slow_down}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Errors.Body != "" || c.Errors.Codes["idempotency_in_progress"] != "" || c.Errors.Codes["rate_limited"] != "slow_down" {
		t.Errorf("explicit errors under stripe = %+v; want only the file's", c.Errors)
	}
	// The environment overrides a profile's value too.
	t.Setenv("IDEMGATE_IDEMPOTENCY_KEY_SYNTAX", "strict")
	c, err = Parse([]byte("profile: stripe\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Idempotency.KeySyntax != modes.KeySyntaxStrict || c.Idempotency.InProgress != modes.InProgressWait {
		t.Errorf("env over profile: key_syntax %q, in_progress %q", c.Idempotency.KeySyntax, c.Idempotency.InProgress)
	}
	t.Setenv("IDEMGATE_PROFILE", "ietf")
	c, err = Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Profile != ProfileIETF || c.Idempotency.ReuseStatus != 422 {
		t.Errorf("IDEMGATE_PROFILE=ietf: profile %q, reuse_status %d", c.Profile, c.Idempotency.ReuseStatus)
	}
}

// TestProfileStripeNeedsStripeAccount: under profile stripe an identity
// without Stripe-Account is refused unless allow_shared_accounts says so;
// an unknown profile is refused.
func TestProfileStripeNeedsStripeAccount(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml string
		ok   bool
	}{
		{"profile: stripe\n", true},
		{"profile: stripe\nidempotency: {identity: {headers: [Authorization]}}\n", false},
		{"profile: stripe\nidempotency: {identity_headers: [Authorization]}\n", false},
		{"profile: stripe\nidempotency: {identity: {headers: [Authorization]}, allow_shared_accounts: true}\n", true},
		{"profile: stripe\nidempotency: {identity: {headers: [Authorization, stripe-account]}}\n", true},
		{"profile: default\nidempotency: {identity: {headers: [Authorization]}}\n", true},
	} {
		c, err := Check([]byte("upstream: {url: \"http://127.0.0.1:3000\"}\n" + tc.yaml))
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v; want ok %v", tc.yaml, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "Stripe-Account")) {
			t.Errorf("%q: %v; want a conflict naming Stripe-Account", tc.yaml, err)
		}
		_ = c
	}
	if _, err := Check([]byte("upstream: {url: \"http://127.0.0.1:3000\"}\nprofile: Stripe\n")); err == nil || !strings.Contains(err.Error(), "profile") {
		t.Errorf("profile Stripe: %v; want refused", err)
	}
}

// TestProfileSources: each key's source, and the profile's choices named
// once, without those the file or the environment replaced.
func TestProfileSources(t *testing.T) {
	t.Parallel()
	data := []byte("profile: stripe\nidempotency:\n  wait_timeout: 2s\n  identity: {headers: [Authorization, Stripe-Account], cookies: [sid]}\n")
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	src, err := c.Sources(data, []string{"IDEMGATE_IDEMPOTENCY_KEY_SYNTAX=strict", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"profile":                           SourceFile,
		"idempotency.wait_timeout":          SourceFile,
		"idempotency.identity.headers":      SourceFile,
		"idempotency.identity.jwt":          SourceDefault, // the file replaced the profile's whole identity
		"idempotency.key_syntax":            SourceEnv,
		"idempotency.in_progress":           SourceProfile,
		"request_id_header":                 SourceProfile,
		"errors.body":                       SourceProfile,
		"idempotency.max_body_bytes":        SourceDefault,
		"listen":                            SourceDefault,
		"idempotency.replay_header":         SourceProfile,
		"idempotency.allow_shared_accounts": SourceDefault,
	} {
		if got := src(key); got != want {
			t.Errorf("source of %s = %s; want %s", key, got, want)
		}
	}
	choices := strings.Join(c.ProfileChoices(src), "\n")
	for _, want := range []string{"idempotency.in_progress: wait", "request_id_header: Request-Id", "errors: "} {
		if !strings.Contains(choices, want) {
			t.Errorf("choices %q lack %q", choices, want)
		}
	}
	if strings.Contains(choices, "identity") || strings.Contains(choices, "key_syntax") {
		t.Errorf("choices %q name keys the file or the environment set", choices)
	}
	y, err := c.EffectiveYAMLSources(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"request_id_header: Request-Id # profile", "wait_timeout: 2s # file", "listen: :8080 # default"} {
		if !strings.Contains(string(y), want) {
			t.Errorf("config output lacks %q", want)
		}
	}
}
