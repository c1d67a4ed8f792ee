package config

import (
	"errors"
	"testing"
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
