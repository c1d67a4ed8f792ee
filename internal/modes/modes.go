// Package modes spells the values of the idempotency settings that choose a
// behaviour: idempotency.key_syntax, and in_progress and unknown_outcome
// (global and per route). The config validates them and the proxy compiles
// them; both read the names, and the proxy the rules, from here.
package modes

import "fmt"

// Values of key_syntax: the rule an idempotency key must follow.
const (
	KeySyntaxStrict    = "strict"    // 1–255 characters from '!' to '~' (the default)
	KeySyntaxPrintable = "printable" // 1–255 visible ASCII characters and inner spaces
	KeySyntaxSFString  = "sf-string" // an RFC 8941 string, whose value is the key
)

// Values of unknown_outcome: what a retry of a write whose outcome is
// unknown gets (DESIGN.md, Unknown outcomes).
const (
	UnknownTakeover = "takeover" // it takes the key over after the lease (the default)
	UnknownHold     = "hold"     // 409 idempotency_outcome_unknown until it is resolved
)

// Values of in_progress: what a duplicate of a running request gets.
const (
	InProgressReject = "reject" // 409 idempotency_in_progress (the default)
	InProgressWait   = "wait"   // it waits for the original's answer
)

// Hold reports whether the unknown_outcome v (UnknownTakeover, also "", or
// UnknownHold) holds an unknown record.
func Hold(v string) (bool, error) { return second(v, UnknownTakeover, UnknownHold) }

// Wait reports whether the in_progress v (InProgressReject, also "", or
// InProgressWait) makes a duplicate wait.
func Wait(v string) (bool, error) { return second(v, InProgressReject, InProgressWait) }

// second reports whether v is b, of the two values a (also "") and b.
func second(v, a, b string) (bool, error) {
	switch v {
	case "", a:
		return false, nil
	case b:
		return true, nil
	}
	return false, fmt.Errorf("%q: want %q or %q", v, a, b)
}
