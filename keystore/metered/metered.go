// Package metered decorates a [keystore.Store] with Prometheus metrics:
// every operation timed, its failures counted by kind, claim takeovers and
// rejected late completions counted. The families are registered on a
// registry the caller owns; README.md documents them.
package metered

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/idemgate/idemgate/internal/latency"
	"github.com/idemgate/idemgate/keystore"
)

// Operation label values.
const (
	opReserve       = "reserve"
	opComplete      = "complete"
	opRelease       = "release"
	opRenew         = "renew"
	opGet           = "get"
	opInFlight      = "in_flight"
	opForceRelease  = "force_release"
	opForceComplete = "force_complete"
	opCompleteClaim = "complete_claim"
	opReleaseClaim  = "release_claim"
	opMarkSent      = "mark_sent"
	opMarkUnknown   = "mark_unknown"
	opResolve       = "resolve"
	opUnknown       = "unknown"
	opAcquireProbe  = "acquire_probe"
	opEndProbe      = "end_probe"
	opProbeStatus   = "probe_status"
)

// New returns s with its operations measured on reg (nil: measured but not
// registered). The result also implements [keystore.Admin] and
// [keystore.ClaimStore] by forwarding to s (whose operations are timed as
// well); when s does not implement one, its methods fail. It panics if reg already holds the families (as
// promauto does): one Store per registry.
func New(s keystore.Store, reg prometheus.Registerer) *Store {
	f := promauto.With(reg)
	ms := &Store{
		inner: s,
		duration: f.NewHistogramVec(latency.HistogramOpts(
			"idemgate_store_operation_duration_seconds",
			"Duration of idempotency store operations, by operation."), []string{"op"}),
		errs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_store_errors_total",
			Help: "Idempotency store operations that failed (the store was unreachable, full, closed or too slow), by operation and kind; the normal answers (in flight, key reused, lease lost, not found) are not errors.",
		}, []string{"op", "kind"}),
		takeovers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_idempotency_takeovers_total",
			Help: "Claims taken over after the lease of their previous holder ended, by route name.",
		}, []string{"route"}),
		late: f.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_idempotency_late_completions_rejected_total",
			Help: "Answers not stored because the claim had been taken over, released or repaired by an operator while the request ran.",
		}),
	}
	ms.admin, _ = s.(keystore.Admin)
	ms.claims, _ = s.(keystore.ClaimStore)
	ms.unknowns, _ = s.(keystore.UnknownStore)
	// Series that exist from the start, so that rate() sees the first
	// failure.
	for _, op := range []string{opReserve, opComplete, opRelease, opRenew, opGet} {
		ms.duration.WithLabelValues(op)
		for _, kind := range []string{"unavailable", "timeout", "full"} {
			ms.errs.WithLabelValues(op, kind)
		}
	}
	return ms
}

// Store is a [keystore.Store] and [keystore.Admin] that records metrics
// about the store it wraps. Build it with [New]. It is safe for concurrent
// use when the wrapped store is.
type Store struct {
	inner     keystore.Store
	admin     keystore.Admin           // nil when inner is not one
	claims    keystore.ClaimStore      // nil when inner is not one
	unknowns  keystore.UnknownStore    // nil when inner is not one
	duration  *prometheus.HistogramVec // op
	errs      *prometheus.CounterVec   // op, kind
	takeovers *prometheus.CounterVec   // route
	late      prometheus.Counter
}

var (
	_ keystore.Store        = (*Store)(nil)
	_ keystore.Admin        = (*Store)(nil)
	_ keystore.UnknownStore = (*Store)(nil)
)

// errNoAdmin is returned by the admin methods of a Store whose store
// has none; errNoClaims by the claim methods of one that is no
// [keystore.ClaimStore].
var (
	errNoAdmin   = errors.New("metered: the store has no admin operations")
	errNoClaims  = errors.New("metered: the store has no claim operations")
	errNoUnknown = errors.New("metered: the store has no unknown-outcome operations")
)

// Unwrap returns the wrapped store.
func (s *Store) Unwrap() keystore.Store { return s.inner }

// done records one operation's duration and, for a failure, its kind.
func (s *Store) done(op string, start time.Time, err error) {
	s.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if kind := errorKind(err); kind != "" {
		s.errs.WithLabelValues(op, kind).Inc()
	}
}

// errorKind classifies a store error for idemgate_store_errors_total: ""
// for success and for the answers that are part of normal operation.
func errorKind(err error) string {
	switch {
	case err == nil,
		errors.Is(err, keystore.ErrNotFound),
		errors.Is(err, keystore.ErrInFlight),
		errors.Is(err, keystore.ErrFingerprintMismatch),
		errors.Is(err, keystore.ErrLeaseLost),
		errors.Is(err, keystore.ErrOutcomeUnknown):
		return ""
	case errors.Is(err, keystore.ErrFull):
		return "full"
	case errors.Is(err, keystore.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "unavailable"
}

// Reserve implements [keystore.Store].
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	start := time.Now()
	res, err := s.inner.Reserve(ctx, k, opts)
	s.done(opReserve, start, err)
	if err == nil && res.Takeover {
		s.takeovers.WithLabelValues(opts.Route).Inc()
	}
	return res, err
}

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	start := time.Now()
	err := s.inner.Complete(ctx, k, token, resp)
	s.done(opComplete, start, err)
	if errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrNotFound) {
		s.late.Inc()
	}
	return err
}

// CompleteClaim implements [keystore.ClaimStore]. Only ErrLeaseLost counts
// as a rejected late completion: another claim holds the key. A record that
// vanished is recreated, and an earlier attempt that stored the answer
// (its reply lost) is Completed, so neither counts.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	if s.claims == nil {
		return 0, errNoClaims
	}
	start := time.Now()
	how, err := s.claims.CompleteClaim(ctx, k, c, resp)
	s.done(opCompleteClaim, start, err)
	if errors.Is(err, keystore.ErrLeaseLost) {
		s.late.Inc()
	}
	return how, err
}

// ReleaseClaim implements [keystore.ClaimStore].
func (s *Store) ReleaseClaim(ctx context.Context, k keystore.Key, id keystore.ClaimID, lease time.Duration) error {
	if s.claims == nil {
		return errNoClaims
	}
	start := time.Now()
	err := s.claims.ReleaseClaim(ctx, k, id, lease)
	s.done(opReleaseClaim, start, err)
	return err
}

// Release implements [keystore.Store].
func (s *Store) Release(ctx context.Context, k keystore.Key, token uint64) error {
	start := time.Now()
	err := s.inner.Release(ctx, k, token)
	s.done(opRelease, start, err)
	return err
}

// Renew implements [keystore.Store].
func (s *Store) Renew(ctx context.Context, k keystore.Key, token uint64, lease time.Duration) (time.Time, error) {
	start := time.Now()
	end, err := s.inner.Renew(ctx, k, token, lease)
	s.done(opRenew, start, err)
	return end, err
}

// Get implements [keystore.Store].
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	start := time.Now()
	rec, err := s.inner.Get(ctx, k)
	s.done(opGet, start, err)
	return rec, err
}

// Close implements [keystore.Store]: it closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	if s.admin == nil {
		return nil, errNoAdmin
	}
	start := time.Now()
	recs, err := s.admin.InFlight(ctx, olderThan, limit)
	var damaged *keystore.DamagedError
	if errors.As(err, &damaged) {
		// The store answered: the skipped records are the admin API's to
		// count (idemgate_admin_damaged_records_total), not a store error.
		s.done(opInFlight, start, nil)
		return recs, err
	}
	s.done(opInFlight, start, err)
	return recs, err
}

// ForceRelease implements [keystore.Admin].
func (s *Store) ForceRelease(ctx context.Context, k keystore.Key) error {
	if s.admin == nil {
		return errNoAdmin
	}
	start := time.Now()
	err := s.admin.ForceRelease(ctx, k)
	s.done(opForceRelease, start, err)
	return err
}

// ForceComplete implements [keystore.Admin].
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	if s.admin == nil {
		return errNoAdmin
	}
	start := time.Now()
	err := s.admin.ForceComplete(ctx, k, resp)
	s.done(opForceComplete, start, err)
	return err
}

// InitRoutes makes the takeover series of the named routes exist at 0, so
// that rate() sees the first takeover.
func (s *Store) InitRoutes(names ...string) {
	for _, n := range names {
		s.takeovers.WithLabelValues(n)
	}
}

// MarkSent implements [keystore.UnknownStore].
func (s *Store) MarkSent(ctx context.Context, k keystore.Key, token uint64, info *keystore.Response) error {
	if s.unknowns == nil {
		return errNoUnknown
	}
	start := time.Now()
	err := s.unknowns.MarkSent(ctx, k, token, info)
	s.done(opMarkSent, start, err)
	return err
}

// MarkUnknown implements [keystore.UnknownStore].
func (s *Store) MarkUnknown(ctx context.Context, k keystore.Key, token uint64, cause keystore.Cause) error {
	if s.unknowns == nil {
		return errNoUnknown
	}
	start := time.Now()
	err := s.unknowns.MarkUnknown(ctx, k, token, cause)
	s.done(opMarkUnknown, start, err)
	return err
}

// Resolve implements [keystore.UnknownStore].
func (s *Store) Resolve(ctx context.Context, k keystore.Key, id keystore.ClaimID, resp *keystore.Response) error {
	if s.unknowns == nil {
		return errNoUnknown
	}
	start := time.Now()
	err := s.unknowns.Resolve(ctx, k, id, resp)
	s.done(opResolve, start, err)
	return err
}

// Unknown implements [keystore.UnknownStore].
func (s *Store) Unknown(ctx context.Context, limit int) ([]keystore.Record, error) {
	if s.unknowns == nil {
		return nil, errNoUnknown
	}
	start := time.Now()
	recs, err := s.unknowns.Unknown(ctx, limit)
	s.done(opUnknown, start, err)
	return recs, err
}

// AcquireProbe implements [keystore.UnknownStore].
func (s *Store) AcquireProbe(ctx context.Context, k keystore.Key, ttl time.Duration) (keystore.ProbeLease, bool, error) {
	if s.unknowns == nil {
		return keystore.ProbeLease{}, false, errNoUnknown
	}
	start := time.Now()
	l, ok, err := s.unknowns.AcquireProbe(ctx, k, ttl)
	s.done(opAcquireProbe, start, err)
	return l, ok, err
}

// EndProbe implements [keystore.UnknownStore].
func (s *Store) EndProbe(ctx context.Context, k keystore.Key, owner string, st keystore.ProbeState, hold, keep time.Duration) error {
	if s.unknowns == nil {
		return errNoUnknown
	}
	start := time.Now()
	err := s.unknowns.EndProbe(ctx, k, owner, st, hold, keep)
	s.done(opEndProbe, start, err)
	return err
}

// ProbeStatus implements [keystore.UnknownStore].
func (s *Store) ProbeStatus(ctx context.Context, k keystore.Key) (keystore.ProbeState, bool, error) {
	if s.unknowns == nil {
		return keystore.ProbeState{}, false, errNoUnknown
	}
	start := time.Now()
	st, ok, err := s.unknowns.ProbeStatus(ctx, k)
	s.done(opProbeStatus, start, err)
	return st, ok, err
}
