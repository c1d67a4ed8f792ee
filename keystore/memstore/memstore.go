// Package memstore is the embedded, in-process [keystore.Store]: idemgate's
// default backend for a single replica.
//
// It is bounded: at most MaxEntries records and about MaxBytes of stored
// answers; when either is reached, new claims fail with [keystore.ErrFull]
// (the proxy fails closed) until expired records are swept. Completing a
// claim that is already in flight is never refused for lack of room, so
// MaxBytes may be exceeded by at most the answers of the requests in flight
// at that moment: an answer that ran upstream is never dropped.
//
// Records expire by their retention. Expired records are invisible at once
// and their memory is reclaimed by a sweeper goroutine that [Store.Close]
// stops.
package memstore

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// Clock tells the time. The zero Options use the system clock; tests inject a
// fake one.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Options configure a [Store]. Zero fields take the documented defaults.
type Options struct {
	// MaxEntries is the most records held at once. Default 1,000,000.
	MaxEntries int
	// MaxBytes bounds the bytes accounted to records (a fixed overhead per
	// record plus its stored answer). Default 1 GiB.
	MaxBytes int64
	// SweepInterval is how often expired records are reclaimed. Default 1m.
	SweepInterval time.Duration
	// Clock is the store's clock. Default: the system clock.
	Clock Clock
}

// entryOverhead is the bytes accounted to a record beside its answer: the
// map slot, the entry struct and the key.
const entryOverhead = 192

const numShards = 64

// Store is the in-memory key store. It is safe for concurrent use. Create it
// with [New].
type Store struct {
	maxEntries int64
	maxBytes   int64
	clock      Clock

	entries atomic.Int64 // records held
	bytes   atomic.Int64 // bytes accounted
	tokens  atomic.Uint64
	closed  atomic.Bool

	shards [numShards]shard

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

type shard struct {
	mu sync.Mutex // protects m
	m  map[keystore.Key]*entry
}

type entry struct {
	state    keystore.State
	fp       keystore.Fingerprint
	route    string
	token    uint64
	claimed  time.Time
	leaseEnd time.Time
	expires  time.Time
	resp     *keystore.Response
	size     int64
}

var (
	_ keystore.Store = (*Store)(nil)
	_ keystore.Admin = (*Store)(nil)
)

// New returns a Store and starts its sweeper. Call Close to stop it.
func New(opts Options) *Store {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 1_000_000
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 1 << 30
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = time.Minute
	}
	if opts.Clock == nil {
		opts.Clock = systemClock{}
	}
	s := &Store{
		maxEntries: int64(opts.MaxEntries),
		maxBytes:   opts.MaxBytes,
		clock:      opts.Clock,
	}
	for i := range s.shards {
		s.shards[i].m = make(map[keystore.Key]*entry)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go s.sweepLoop(ctx, opts.SweepInterval)
	return s
}

func (s *Store) shard(k keystore.Key) *shard {
	return &s.shards[k[0]%numShards]
}

func (s *Store) check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return keystore.ErrClosed
	}
	return nil
}

// live returns the unexpired entry for k. The caller holds sh.mu.
func (s *Store) live(sh *shard, k keystore.Key, now time.Time) *entry {
	e := sh.m[k]
	if e == nil {
		return nil
	}
	if !now.Before(e.expires) {
		s.drop(sh, k, e)
		return nil
	}
	return e
}

// drop removes k's entry. The caller holds sh.mu.
func (s *Store) drop(sh *shard, k keystore.Key, e *entry) {
	delete(sh.m, k)
	s.entries.Add(-1)
	s.bytes.Add(-e.size)
}

// Reserve implements [keystore.Store].
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	if err := s.check(ctx); err != nil {
		return keystore.Reservation{}, err
	}
	now := s.clock.Now()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()

	e := s.live(sh, k, now)
	if e != nil {
		if e.fp != opts.Fingerprint {
			return keystore.Reservation{}, keystore.ErrFingerprintMismatch
		}
		switch e.state {
		case keystore.StateCompleted:
			return keystore.Reservation{Response: e.resp}, nil
		case keystore.StateInFlight:
			if now.Before(e.leaseEnd) {
				return keystore.Reservation{}, keystore.ErrInFlight
			}
			e.token = s.tokens.Add(1)
			e.claimed = now
			e.leaseEnd = now.Add(opts.Lease)
			return keystore.Reservation{Token: e.token, LeaseEnd: e.leaseEnd, Takeover: true}, nil
		}
	}
	size := int64(entryOverhead + len(opts.Route))
	if s.entries.Load() >= s.maxEntries || s.bytes.Load()+size > s.maxBytes {
		return keystore.Reservation{}, keystore.ErrFull
	}
	e = &entry{
		state:    keystore.StateInFlight,
		fp:       opts.Fingerprint,
		route:    opts.Route,
		token:    s.tokens.Add(1),
		claimed:  now,
		leaseEnd: now.Add(opts.Lease),
		expires:  now.Add(opts.Retention),
		size:     size,
	}
	sh.m[k] = e
	s.entries.Add(1)
	s.bytes.Add(size)
	return keystore.Reservation{Token: e.token, LeaseEnd: e.leaseEnd}, nil
}

// holder returns k's in-flight entry under token. The caller holds sh.mu.
func (s *Store) holder(sh *shard, k keystore.Key, token uint64, now time.Time) (*entry, error) {
	e := s.live(sh, k, now)
	if e == nil {
		return nil, keystore.ErrNotFound
	}
	if e.state != keystore.StateInFlight || e.token != token {
		return nil, keystore.ErrLeaseLost
	}
	return e, nil
}

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.holder(sh, k, token, s.clock.Now())
	if err != nil {
		return err
	}
	s.complete(e, resp)
	return nil
}

// complete stores resp in e. The caller holds e's shard lock.
func (s *Store) complete(e *entry, resp *keystore.Response) {
	c := cloneResponse(resp)
	grow := int64(c.Size())
	e.state = keystore.StateCompleted
	e.resp = c
	e.leaseEnd = time.Time{}
	e.size += grow
	s.bytes.Add(grow)
}

// Release implements [keystore.Store]. The memory store deletes a released
// record: its tokens come from one sequence for the whole store, so a later
// claim can never reuse a token.
func (s *Store) Release(ctx context.Context, k keystore.Key, token uint64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.holder(sh, k, token, s.clock.Now())
	if err != nil {
		return err
	}
	s.drop(sh, k, e)
	return nil
}

// Renew implements [keystore.Store].
func (s *Store) Renew(ctx context.Context, k keystore.Key, token uint64, lease time.Duration) (time.Time, error) {
	if err := s.check(ctx); err != nil {
		return time.Time{}, err
	}
	now := s.clock.Now()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.holder(sh, k, token, now)
	if err != nil {
		return time.Time{}, err
	}
	end := now.Add(lease)
	if end.After(e.expires) {
		end = e.expires
	}
	if end.After(e.leaseEnd) {
		e.leaseEnd = end
	}
	return e.leaseEnd, nil
}

// Get implements [keystore.Store].
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return keystore.Record{}, err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.live(sh, k, s.clock.Now())
	if e == nil {
		return keystore.Record{}, keystore.ErrNotFound
	}
	return e.record(k), nil
}

func (e *entry) record(k keystore.Key) keystore.Record {
	return keystore.Record{
		Key:         k,
		State:       e.state,
		Fingerprint: e.fp,
		Route:       e.route,
		Token:       e.token,
		Claimed:     e.claimed,
		LeaseEnd:    e.leaseEnd,
		Expires:     e.expires,
		Response:    e.resp,
	}
}

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	now := s.clock.Now()
	cutoff := now.Add(-olderThan)
	var out []keystore.Record
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.state == keystore.StateInFlight && now.Before(e.expires) && !e.claimed.After(cutoff) {
				out = append(out, e.record(k))
			}
		}
		sh.mu.Unlock()
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Claimed.Before(out[j].Claimed) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// inFlight returns k's in-flight entry whatever its token. The caller holds
// sh.mu.
func (s *Store) inFlight(sh *shard, k keystore.Key) (*entry, error) {
	e := s.live(sh, k, s.clock.Now())
	if e == nil {
		return nil, keystore.ErrNotFound
	}
	if e.state != keystore.StateInFlight {
		return nil, keystore.ErrLeaseLost
	}
	return e, nil
}

// ForceRelease implements [keystore.Admin].
func (s *Store) ForceRelease(ctx context.Context, k keystore.Key) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.inFlight(sh, k)
	if err != nil {
		return err
	}
	s.drop(sh, k, e)
	return nil
}

// ForceComplete implements [keystore.Admin].
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.inFlight(sh, k)
	if err != nil {
		return err
	}
	s.complete(e, resp)
	return nil
}

// Len returns the number of records held, expired ones not yet swept
// included.
func (s *Store) Len() int { return int(s.entries.Load()) }

// Bytes returns the bytes accounted to the records held.
func (s *Store) Bytes() int64 { return s.bytes.Load() }

// Close stops the sweeper. It is idempotent.
func (s *Store) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.cancel()
		s.wg.Wait()
	})
	return nil
}

func (s *Store) sweepLoop(ctx context.Context, every time.Duration) {
	defer s.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sweep()
		}
	}
}

// sweep drops every expired record, one shard at a time so that requests
// are never blocked for long.
func (s *Store) sweep() {
	now := s.clock.Now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if !now.Before(e.expires) {
				s.drop(sh, k, e)
			}
		}
		sh.mu.Unlock()
	}
}

// cloneResponse copies resp so that the caller may reuse its buffers.
func cloneResponse(r *keystore.Response) *keystore.Response {
	if r == nil {
		return &keystore.Response{}
	}
	c := &keystore.Response{Status: r.Status, TooLarge: r.TooLarge}
	if r.Header != nil {
		c.Header = r.Header.Clone()
	}
	if r.Body != nil {
		c.Body = append([]byte(nil), r.Body...)
	}
	return c
}
