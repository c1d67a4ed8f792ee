package app

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// TestProxyOptionsIdentity: the default identity is still the
// Authorization header, the alias still works, and the sources the proxy
// does not use yet are refused rather than ignored.
func TestProxyOptionsIdentity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		mutate  func(*config.Config)
		headers []string
		err     string
	}{
		{"default", func(*config.Config) {}, []string{"Authorization"}, ""},
		{"alias", func(c *config.Config) { c.Idempotency.IdentityHeaders = []string{"Ucp-Agent"} }, []string{"Ucp-Agent"}, ""},
		{"identity.headers", func(c *config.Config) { c.Idempotency.Identity.Headers = []string{"X-Api-Key"} }, []string{"X-Api-Key"}, ""},
		{"cookies", func(c *config.Config) { c.Idempotency.Identity.Cookies = []string{"sid"} }, nil, "idempotency.identity"},
		{"jwt", func(c *config.Config) { c.Idempotency.Identity.JWT.JWKSFile = "/x" }, nil, "idempotency.identity"},
		{"by header", func(c *config.Config) {
			c.Routes = []config.Route{{Name: "a", Method: "POST", Path: "/a", RateLimit: &config.RateLimit{Requests: 1, Per: time.Second, By: "header:X-Api-Key"}}}
		}, nil, "routes[0].rate_limit.by"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := config.Default()
			c.Upstream.URL = "http://127.0.0.1:3000"
			tt.mutate(c)
			o, err := proxyOptions(c, nil, nil, nil, slog.New(slog.DiscardHandler))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("proxyOptions = %v; want an error naming %s", err, tt.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(o.Idempotency.IdentityHeaders, tt.headers) {
				t.Errorf("proxyOptions = %v, headers %v; want %v", err, o.Idempotency.IdentityHeaders, tt.headers)
			}
		})
	}
}
