// Package stripe drives Stripe's own Go SDK (stripe-go) through idemgate
// with profile: stripe, against Stripe's own mock server (stripe-mock),
// both built from the Go module proxy (issue 27's proof). It is a module
// of its own, as deploy/test is, so that the main go.mod stays free of
// them.
package stripe
