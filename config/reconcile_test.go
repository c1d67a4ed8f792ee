package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/modes"
)

// reconcileConfig returns a valid config whose update_checkout route
// (routes[1], path /ucp/v1/checkout-sessions/{id}) holds unknown
// outcomes and has a reconcile probe.
func reconcileConfig() *Config {
	c := validConfig()
	c.Idempotency.EncryptionKeyEnv = "IDEMGATE_KEY"
	c.Routes[1].UnknownOutcome = modes.UnknownHold
	c.Routes[1].Reconcile = &Reconcile{Path: "/ucp/v1/checkout-sessions/{id}/orders/{key}"}
	return c
}

func TestValidateReconcile(t *testing.T) {
	t.Parallel()
	if err := reconcileConfig().Validate(); err != nil {
		t.Fatalf("the reconcile config is refused: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(c *Config, rc *Reconcile)
		key    string // "" accepted
		err    error
		also   string
	}{
		{"defaults", func(*Config, *Reconcile) {}, "", nil, ""},
		{"head, statuses and every", func(_ *Config, rc *Reconcile) {
			rc.Method, rc.Found, rc.Absent, rc.Status, rc.Every = "HEAD", []int{200, 204}, []int{404, 410}, 201, time.Second
		}, "", nil, ""},
		{"hold inherited", func(c *Config, _ *Reconcile) {
			c.Routes[1].UnknownOutcome, c.Idempotency.UnknownOutcome = "", modes.UnknownHold
		}, "", nil, ""},
		{"post", func(_ *Config, rc *Reconcile) { rc.Method = "POST" }, "routes[1].reconcile.method", ErrInvalid, "GET or HEAD"},
		{"lower-case get", func(_ *Config, rc *Reconcile) { rc.Method = "get" }, "routes[1].reconcile.method", ErrInvalid, ""},
		{"no path", func(_ *Config, rc *Reconcile) { rc.Path = "" }, "routes[1].reconcile.path", ErrRequired, ""},
		{"bad path", func(_ *Config, rc *Reconcile) { rc.Path = "orders/{key}" }, "routes[1].reconcile.path", ErrInvalid, ""},
		{"placeholder inside a segment", func(_ *Config, rc *Reconcile) { rc.Path = "/orders/ref-{key}" }, "routes[1].reconcile.path", ErrInvalid, ""},
		{"query", func(_ *Config, rc *Reconcile) { rc.Path = "/orders?ref={key}" }, "routes[1].reconcile.path", ErrInvalid, ""},
		{"unknown placeholder", func(_ *Config, rc *Reconcile) { rc.Path = "/orders/{ref}" }, "routes[1].reconcile.path", ErrInvalid, "{ref} is neither {key}"},
		{"route parameter named key", func(c *Config, rc *Reconcile) {
			c.Routes[1].Path, c.Routes[1].Session = "/ucp/v1/checkout-sessions/{key}", nil
			rc.Path = "/orders/{key}"
		}, "routes[1].reconcile.path", ErrConflict, ""},
		{"graphql", func(c *Config, _ *Reconcile) { c.Routes[1].Protocol = ProtocolGraphQL }, "routes[1].reconcile", ErrConflict, "graphql"},
		{"not idempotent", func(c *Config, rc *Reconcile) {
			c.Routes[1].Reconcile = nil
			c.Routes[2].Reconcile = rc
		}, "routes[2].reconcile", ErrConflict, "not idempotent"},
		{"takeover", func(c *Config, _ *Reconcile) { c.Routes[1].UnknownOutcome = modes.UnknownTakeover }, "routes[1].reconcile", ErrConflict, "not hold"},
		{"no encryption key", func(c *Config, _ *Reconcile) { c.Idempotency.EncryptionKeyEnv = "" }, "routes[1].reconcile", ErrRequired, "encryption_key_env"},
		{"found 401", func(_ *Config, rc *Reconcile) { rc.Found = []int{200, 401} }, "routes[1].reconcile.found[1]", ErrInvalid, ""},
		{"absent 403", func(_ *Config, rc *Reconcile) { rc.Absent = []int{403} }, "routes[1].reconcile.absent[0]", ErrInvalid, ""},
		{"found and absent overlap", func(_ *Config, rc *Reconcile) { rc.Found, rc.Absent = []int{200, 404}, []int{404} }, "routes[1].reconcile.absent[0]", ErrDuplicate, "found"},
		{"found 1xx", func(_ *Config, rc *Reconcile) { rc.Found = []int{100} }, "routes[1].reconcile.found[0]", ErrRange, ""},
		{"status 304", func(_ *Config, rc *Reconcile) { rc.Status = 304 }, "routes[1].reconcile.status", ErrRange, ""},
		{"status 600", func(_ *Config, rc *Reconcile) { rc.Status = 600 }, "routes[1].reconcile.status", ErrRange, ""},
		{"every too short", func(_ *Config, rc *Reconcile) { rc.Every = 500 * time.Millisecond }, "routes[1].reconcile.every", ErrRange, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := reconcileConfig()
			tt.mutate(c, c.Routes[1].Reconcile)
			err := c.Validate()
			if tt.key == "" {
				if err != nil {
					t.Fatalf("Validate: %v; want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("Validate: %v; want %v", err, tt.err)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tt.key+": ") || !strings.Contains(lines[0], tt.also) {
				t.Fatalf("Validate: %q; want one line starting %q with %q", lines, tt.key+": ", tt.also)
			}
		})
	}
}
