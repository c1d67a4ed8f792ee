// Package metered decorates a [keystore.Store] with Prometheus metrics:
// every operation timed, its failures counted by kind, claim takeovers and
// rejected late completions counted. The families are registered on a
// registry the caller owns; README.md documents them.
package metered

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/idemgate/idemgate/internal/metric"
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
// [keystore.UnknownStore] by forwarding to s (whose operations are timed as
// well); when s does not implement one, its methods fail with an error
// wrapping [errors.ErrUnsupported]. It panics if reg already holds the
// families (as promauto does): one Store per registry.
func New(s keystore.Store, reg prometheus.Registerer) *Store {
	f := promauto.With(reg)
	ms := &Store{
		Wrapper: keystore.Wrap(s),
		duration: metric.Latency(f, "idemgate_store_operation_duration_seconds",
			"Duration of idempotency store operations, by operation.", "op"),
		errs: metric.CounterVec(f, "idemgate_store_errors_total",
			"Idempotency store operations that failed (the store was unreachable, full, closed or too slow), by operation and kind; the normal answers (in flight, key reused, lease lost, not found) are not errors.", "op", "kind"),
		takeovers: metric.CounterVec(f, "idemgate_idempotency_takeovers_total",
			"Claims taken over after the lease of their previous holder ended, by route name.", "route"),
		late: metric.Counter(f, "idemgate_idempotency_late_completions_rejected_total",
			"Answers not stored because the claim had been taken over, released or repaired by an operator while the request ran."),
	}
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
// use when the wrapped store is. It declares every operation (each is
// timed); Close and Unwrap pass through ([keystore.Wrapper]).
type Store struct {
	keystore.Wrapper
	duration  *prometheus.HistogramVec // op
	observers sync.Map                 // op → duration's series: looked up once (issue 31)
	errs      *prometheus.CounterVec   // op, kind
	takeovers *prometheus.CounterVec   // route
	late      prometheus.Counter
}

var (
	_ keystore.Store        = (*Store)(nil)
	_ keystore.Admin        = (*Store)(nil)
	_ keystore.UnknownStore = (*Store)(nil)
)

// done records the duration of one operation started at start and, for a
// failure in *err, its kind. Operations defer it.
func (s *Store) done(op string, start time.Time, err *error) {
	o, ok := s.observers.Load(op)
	if !ok {
		o, _ = s.observers.LoadOrStore(op, s.duration.WithLabelValues(op))
	}
	o.(prometheus.Observer).Observe(time.Since(start).Seconds())
	if kind := errorKind(*err); kind != "" {
		s.errs.WithLabelValues(op, kind).Inc()
	}
}

// errorKind classifies a store error for idemgate_store_errors_total: ""
// for success, for the answers that are part of normal operation and for
// an operation the store does not have.
func errorKind(err error) string {
	switch {
	case err == nil,
		errors.Is(err, keystore.ErrNotFound),
		errors.Is(err, keystore.ErrInFlight),
		errors.Is(err, keystore.ErrFingerprintMismatch),
		errors.Is(err, keystore.ErrLeaseLost),
		errors.Is(err, keystore.ErrOutcomeUnknown),
		errors.Is(err, errors.ErrUnsupported):
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
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (res keystore.Reservation, err error) {
	defer s.done(opReserve, time.Now(), &err)
	res, err = s.Wrapper.Reserve(ctx, k, opts)
	if err == nil && res.Takeover {
		s.takeovers.WithLabelValues(opts.Route).Inc()
	}
	return res, err
}

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) (err error) {
	defer s.done(opComplete, time.Now(), &err)
	err = s.Wrapper.Complete(ctx, k, token, resp)
	if errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrNotFound) {
		s.late.Inc()
	}
	return err
}

// CompleteClaim implements [keystore.Store]. Only ErrLeaseLost counts
// as a rejected late completion: another claim holds the key. A record that
// vanished is recreated, and an earlier attempt that stored the answer
// (its reply lost) is Completed, so neither counts.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (how keystore.Completion, err error) {
	defer s.done(opCompleteClaim, time.Now(), &err)
	how, err = s.Wrapper.CompleteClaim(ctx, k, c, resp)
	if errors.Is(err, keystore.ErrLeaseLost) {
		s.late.Inc()
	}
	return how, err
}

// ReleaseClaim implements [keystore.Store].
func (s *Store) ReleaseClaim(ctx context.Context, k keystore.Key, id keystore.ClaimID, lease time.Duration) (err error) {
	defer s.done(opReleaseClaim, time.Now(), &err)
	return s.Wrapper.ReleaseClaim(ctx, k, id, lease)
}

// Release implements [keystore.Store].
func (s *Store) Release(ctx context.Context, k keystore.Key, token uint64) (err error) {
	defer s.done(opRelease, time.Now(), &err)
	return s.Wrapper.Release(ctx, k, token)
}

// Renew implements [keystore.Store].
func (s *Store) Renew(ctx context.Context, k keystore.Key, token uint64, lease time.Duration) (_ time.Time, err error) {
	defer s.done(opRenew, time.Now(), &err)
	return s.Wrapper.Renew(ctx, k, token, lease)
}

// Get implements [keystore.Store].
func (s *Store) Get(ctx context.Context, k keystore.Key) (_ keystore.Record, err error) {
	defer s.done(opGet, time.Now(), &err)
	return s.Wrapper.Get(ctx, k)
}

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	start := time.Now()
	recs, err := s.Wrapper.InFlight(ctx, olderThan, limit)
	failed := err
	if damaged := (*keystore.DamagedError)(nil); errors.As(err, &damaged) {
		// The store answered: the skipped records are the admin API's to
		// count (idemgate_admin_damaged_records_total), not a store error.
		failed = nil
	}
	s.done(opInFlight, start, &failed)
	return recs, err
}

// ForceRelease implements [keystore.Admin].
func (s *Store) ForceRelease(ctx context.Context, k keystore.Key) (err error) {
	defer s.done(opForceRelease, time.Now(), &err)
	return s.Wrapper.ForceRelease(ctx, k)
}

// ForceComplete implements [keystore.Admin].
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) (err error) {
	defer s.done(opForceComplete, time.Now(), &err)
	return s.Wrapper.ForceComplete(ctx, k, resp)
}

// InitRoutes makes the takeover series of the named routes exist at 0, so
// that rate() sees the first takeover.
func (s *Store) InitRoutes(names ...string) {
	for _, n := range names {
		s.takeovers.WithLabelValues(n)
	}
}

// MarkSent implements [keystore.UnknownStore].
func (s *Store) MarkSent(ctx context.Context, k keystore.Key, token uint64, info *keystore.Response) (err error) {
	defer s.done(opMarkSent, time.Now(), &err)
	return s.Wrapper.MarkSent(ctx, k, token, info)
}

// MarkUnknown implements [keystore.UnknownStore].
func (s *Store) MarkUnknown(ctx context.Context, k keystore.Key, token uint64, cause keystore.Cause) (err error) {
	defer s.done(opMarkUnknown, time.Now(), &err)
	return s.Wrapper.MarkUnknown(ctx, k, token, cause)
}

// Resolve implements [keystore.UnknownStore].
func (s *Store) Resolve(ctx context.Context, k keystore.Key, id keystore.ClaimID, resp *keystore.Response) (err error) {
	defer s.done(opResolve, time.Now(), &err)
	return s.Wrapper.Resolve(ctx, k, id, resp)
}

// Unknown implements [keystore.UnknownStore].
func (s *Store) Unknown(ctx context.Context, limit int) (_ []keystore.Record, err error) {
	defer s.done(opUnknown, time.Now(), &err)
	return s.Wrapper.Unknown(ctx, limit)
}

// AcquireProbe implements [keystore.UnknownStore].
func (s *Store) AcquireProbe(ctx context.Context, k keystore.Key, ttl time.Duration) (_ keystore.ProbeLease, _ bool, err error) {
	defer s.done(opAcquireProbe, time.Now(), &err)
	return s.Wrapper.AcquireProbe(ctx, k, ttl)
}

// EndProbe implements [keystore.UnknownStore].
func (s *Store) EndProbe(ctx context.Context, k keystore.Key, owner string, st keystore.ProbeState, hold, keep time.Duration) (err error) {
	defer s.done(opEndProbe, time.Now(), &err)
	return s.Wrapper.EndProbe(ctx, k, owner, st, hold, keep)
}

// ProbeStatus implements [keystore.UnknownStore].
func (s *Store) ProbeStatus(ctx context.Context, k keystore.Key) (_ keystore.ProbeState, _ bool, err error) {
	defer s.done(opProbeStatus, time.Now(), &err)
	return s.Wrapper.ProbeStatus(ctx, k)
}
