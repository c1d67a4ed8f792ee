package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestIETFHeadersKey: limiter.ietf_headers is off by default, and set from
// the file or from IDEMGATE_LIMITER_IETF_HEADERS; anything but a boolean is
// refused, naming the key.
func TestIETFHeadersKey(t *testing.T) {
	if Default().Limiter.IETFHeaders {
		t.Error("Default().Limiter.IETFHeaders = true; want false")
	}
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Limiter.IETFHeaders {
		t.Error("full.yaml: limiter.ietf_headers = false; want true")
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate = %v; want nil", err)
	}
	_, err = Parse([]byte("limiter: {ietf_headers: sometimes}\n"))
	var fe *FieldError
	if !errors.Is(err, ErrDecode) || !errors.As(err, &fe) || fe.Key != "limiter.ietf_headers" {
		t.Errorf("ietf_headers: sometimes = %v; want an ErrDecode naming limiter.ietf_headers", err)
	}
	t.Setenv("IDEMGATE_LIMITER_IETF_HEADERS", "true")
	if c, err := Parse([]byte("upstream: {url: \"http://127.0.0.1:3000\"}\n")); err != nil || !c.Limiter.IETFHeaders {
		t.Errorf("with IDEMGATE_LIMITER_IETF_HEADERS=true: %v; want true, nil", err)
	}
}

func TestEdgePerPeriod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      float64
		rate    int
		per     time.Duration
		wantErr bool
	}{
		{0, 0, time.Second, false},
		{100, 100, time.Second, false},
		{50.5, 50500, 1000 * time.Second, false},
		{0.5, 500, 1000 * time.Second, false},
		{0.001, 1, 1000 * time.Second, false},
		{0.0001, 0, 0, true},
		{1.0005, 0, 0, true},
		{2e9, 0, 0, true},
	}
	for _, tt := range tests {
		rate, per, err := EdgeLimit{Rate: tt.in}.PerPeriod()
		if rate != tt.rate || per != tt.per || (err != nil) != tt.wantErr {
			t.Errorf("PerPeriod(%v) = %d, %v, %v; want %d, %v, error %v", tt.in, rate, per, err, tt.rate, tt.per, tt.wantErr)
		}
	}
}

// TestValidateLimitPrecision: Validate refuses an edge rate the limiter
// cannot count exactly and, with limiter.backend redis, a route window that
// is not a whole number of microseconds.
func TestValidateLimitPrecision(t *testing.T) {
	t.Parallel()
	cfg, err := Parse([]byte(`
upstream: {url: "http://127.0.0.1:1"}
edge_limit: {rate: 0.0001}
limiter: {backend: redis}
store: {backend: redis, redis: {addrs: ["127.0.0.1:1"]}}
routes:
  - {name: a, method: GET, path: /a, rate_limit: {requests: 1, per: 1500ns}}
`))
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "edge_limit.rate") || !strings.Contains(err.Error(), "routes[0].rate_limit.per") ||
		strings.Contains(err.Error(), "limiter.backend: ") {
		t.Errorf("Validate = %v; want refusals of edge_limit.rate and routes[0].rate_limit.per, and limiter.backend redis accepted", err)
	}
}
