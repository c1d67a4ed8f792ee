package keystore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Wrapper is the pass-through a store wrapper embeds (keystore/compressed,
// keystore/sealed, keystore/replaycache, keystore/metered): it forwards
// every method of [Store], [Admin] and [UnknownStore] to the inner store,
// so that a wrapper declares only the methods it changes. An Admin or
// UnknownStore method returns an error wrapping [errors.ErrUnsupported]
// when the inner store is not one. Build it with [Wrap].
//
// A wrapper that transforms what a method carries (it seals or compresses
// answers) must declare every method that carries an answer, a record or
// an info, even to pass it through as it is: an inherited one would hand
// the inner store's bytes over untouched. The wrappers' tests check it
// (keystore's wrap_test.go).
type Wrapper struct {
	inner    Store
	admin    Admin        // nil when inner is not one
	unknowns UnknownStore // nil when inner is not one
}

// Wrap returns the pass-through to inner.
func Wrap(inner Store) Wrapper {
	w := Wrapper{inner: inner}
	w.admin, _ = inner.(Admin)
	w.unknowns, _ = inner.(UnknownStore)
	return w
}

// Unwrap returns the wrapped store.
func (w *Wrapper) Unwrap() Store { return w.inner }

// Reserve forwards to the inner store.
func (w *Wrapper) Reserve(ctx context.Context, key Key, opts ReserveOptions) (Reservation, error) {
	return w.inner.Reserve(ctx, key, opts)
}

// Complete forwards to the inner store.
func (w *Wrapper) Complete(ctx context.Context, key Key, token uint64, resp *Response) error {
	return w.inner.Complete(ctx, key, token, resp)
}

// Release forwards to the inner store.
func (w *Wrapper) Release(ctx context.Context, key Key, token uint64) error {
	return w.inner.Release(ctx, key, token)
}

// Renew forwards to the inner store.
func (w *Wrapper) Renew(ctx context.Context, key Key, token uint64, lease time.Duration) (time.Time, error) {
	return w.inner.Renew(ctx, key, token, lease)
}

// Get forwards to the inner store.
func (w *Wrapper) Get(ctx context.Context, key Key) (Record, error) {
	return w.inner.Get(ctx, key)
}

// CompleteClaim forwards to the inner store.
func (w *Wrapper) CompleteClaim(ctx context.Context, key Key, c Claim, resp *Response) (Completion, error) {
	return w.inner.CompleteClaim(ctx, key, c, resp)
}

// ReleaseClaim forwards to the inner store.
func (w *Wrapper) ReleaseClaim(ctx context.Context, key Key, id ClaimID, lease time.Duration) error {
	return w.inner.ReleaseClaim(ctx, key, id, lease)
}

// Close closes the inner store.
func (w *Wrapper) Close() error { return w.inner.Close() }

// admins returns the inner store's [Admin], or an error wrapping
// [errors.ErrUnsupported] when it is not one.
func (w *Wrapper) admins() (Admin, error) {
	if w.admin == nil {
		return nil, fmt.Errorf("keystore: the wrapped store %T has no admin operations: %w", w.inner, errors.ErrUnsupported)
	}
	return w.admin, nil
}

// unknownOps returns the inner store's [UnknownStore], or an error
// wrapping [errors.ErrUnsupported] when it is not one.
func (w *Wrapper) unknownOps() (UnknownStore, error) {
	if w.unknowns == nil {
		return nil, fmt.Errorf("keystore: the wrapped store %T has no unknown-outcome operations: %w", w.inner, errors.ErrUnsupported)
	}
	return w.unknowns, nil
}

// InFlight forwards to the inner store's [Admin].
func (w *Wrapper) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]Record, error) {
	a, err := w.admins()
	if err != nil {
		return nil, err
	}
	return a.InFlight(ctx, olderThan, limit)
}

// ForceRelease forwards to the inner store's [Admin].
func (w *Wrapper) ForceRelease(ctx context.Context, key Key) error {
	a, err := w.admins()
	if err != nil {
		return err
	}
	return a.ForceRelease(ctx, key)
}

// ForceComplete forwards to the inner store's [Admin].
func (w *Wrapper) ForceComplete(ctx context.Context, key Key, resp *Response) error {
	a, err := w.admins()
	if err != nil {
		return err
	}
	return a.ForceComplete(ctx, key, resp)
}

// MarkSent forwards to the inner store's [UnknownStore].
func (w *Wrapper) MarkSent(ctx context.Context, key Key, token uint64, info *Response) error {
	u, err := w.unknownOps()
	if err != nil {
		return err
	}
	return u.MarkSent(ctx, key, token, info)
}

// MarkUnknown forwards to the inner store's [UnknownStore].
func (w *Wrapper) MarkUnknown(ctx context.Context, key Key, token uint64, cause Cause) error {
	u, err := w.unknownOps()
	if err != nil {
		return err
	}
	return u.MarkUnknown(ctx, key, token, cause)
}

// Resolve forwards to the inner store's [UnknownStore].
func (w *Wrapper) Resolve(ctx context.Context, key Key, id ClaimID, resp *Response) error {
	u, err := w.unknownOps()
	if err != nil {
		return err
	}
	return u.Resolve(ctx, key, id, resp)
}

// Unknown forwards to the inner store's [UnknownStore].
func (w *Wrapper) Unknown(ctx context.Context, limit int) ([]Record, error) {
	u, err := w.unknownOps()
	if err != nil {
		return nil, err
	}
	return u.Unknown(ctx, limit)
}

// AcquireProbe forwards to the inner store's [UnknownStore]; a probe's
// lease and state hold no client data.
func (w *Wrapper) AcquireProbe(ctx context.Context, key Key, ttl time.Duration) (ProbeLease, bool, error) {
	u, err := w.unknownOps()
	if err != nil {
		return ProbeLease{}, false, err
	}
	return u.AcquireProbe(ctx, key, ttl)
}

// EndProbe forwards to the inner store's [UnknownStore].
func (w *Wrapper) EndProbe(ctx context.Context, key Key, owner string, st ProbeState, hold, keep time.Duration) error {
	u, err := w.unknownOps()
	if err != nil {
		return err
	}
	return u.EndProbe(ctx, key, owner, st, hold, keep)
}

// ProbeStatus forwards to the inner store's [UnknownStore].
func (w *Wrapper) ProbeStatus(ctx context.Context, key Key) (ProbeState, bool, error) {
	u, err := w.unknownOps()
	if err != nil {
		return ProbeState{}, false, err
	}
	return u.ProbeStatus(ctx, key)
}

var (
	_ UnknownStore = (*Wrapper)(nil)
	_ Admin        = (*Wrapper)(nil)
)
