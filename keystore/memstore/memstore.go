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

// Options configure a [Store]. Zero fields take the documented defaults.
type Options struct {
	// MaxEntries is the most records held at once. Default 1,000,000.
	MaxEntries int
	// MaxBytes bounds the bytes accounted to records (a fixed overhead per
	// record plus its stored answer). Default 1 GiB.
	MaxBytes int64
	// SweepInterval is how often expired records are reclaimed. Default 1m.
	SweepInterval time.Duration
	// Now is the store's clock. Default time.Now; tests inject a fake one.
	Now func() time.Time
}

// entryOverhead is the bytes accounted to a record beside its encoded
// answer: the map slot with the key, and the entry struct.
const entryOverhead = 192

const numShards = 64

// Store is the in-memory key store. It is safe for concurrent use. Create it
// with [New].
type Store struct {
	maxEntries int64
	maxBytes   int64
	clock      func() time.Time
	base       time.Time // entries keep times as offsets from base

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

// entry is one record, kept small: a completed record costs its encoded
// answer plus about 200 bytes (BenchmarkMemoryPerRecord). Times are offsets
// from the store's base time, so that comparisons use the monotonic clock
// when the clock provides one.
type entry struct {
	fp       keystore.Fingerprint
	route    string
	token    uint64
	claimed  time.Duration
	leaseEnd time.Duration
	expires  time.Duration
	answer   []byte // completed: keystore.EncodeResponse of the answer
	size     int64
	state    keystore.State
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
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{
		maxEntries: int64(opts.MaxEntries),
		maxBytes:   opts.MaxBytes,
		clock:      opts.Now,
	}
	s.base = s.clock()
	for i := range s.shards {
		s.shards[i].m = make(map[keystore.Key]*entry)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go s.sweepLoop(ctx, opts.SweepInterval)
	return s
}

// now returns the store clock's time as an offset from base.
func (s *Store) now() time.Duration { return s.clock().Sub(s.base) }

// at returns the time of an offset from base.
func (s *Store) at(d time.Duration) time.Time { return s.base.Add(d) }

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
func (s *Store) live(sh *shard, k keystore.Key, now time.Duration) *entry {
	e := sh.m[k]
	if e == nil {
		return nil
	}
	if now >= e.expires {
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
	now := s.now()
	sh := s.shard(k)
	sh.mu.Lock()
	e := s.live(sh, k, now)
	if e != nil {
		if e.fp != opts.Fingerprint {
			sh.mu.Unlock()
			return keystore.Reservation{}, keystore.ErrFingerprintMismatch
		}
		switch e.state {
		case keystore.StateCompleted:
			answer := e.answer
			sh.mu.Unlock()
			// Decoded outside the lock; answer is never modified.
			resp, err := keystore.DecodeResponse(answer)
			if err != nil {
				return keystore.Reservation{}, err
			}
			return keystore.Reservation{Response: resp}, nil
		case keystore.StateInFlight:
			defer sh.mu.Unlock()
			if now < e.leaseEnd {
				return keystore.Reservation{}, keystore.ErrInFlight
			}
			e.token = s.tokens.Add(1)
			e.claimed = now
			e.leaseEnd = now + opts.Lease
			return keystore.Reservation{Token: e.token, LeaseEnd: s.at(e.leaseEnd), Takeover: true}, nil
		}
	}
	defer sh.mu.Unlock()
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
		leaseEnd: now + opts.Lease,
		expires:  now + opts.Retention,
		size:     size,
	}
	sh.m[k] = e
	s.entries.Add(1)
	s.bytes.Add(size)
	return keystore.Reservation{Token: e.token, LeaseEnd: s.at(e.leaseEnd)}, nil
}

// holder returns k's in-flight entry under token. The caller holds sh.mu.
func (s *Store) holder(sh *shard, k keystore.Key, token uint64, now time.Duration) (*entry, error) {
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
	e, err := s.holder(sh, k, token, s.now())
	if err != nil {
		return err
	}
	s.complete(e, resp)
	return nil
}

// complete stores resp in e. The caller holds e's shard lock.
func (s *Store) complete(e *entry, resp *keystore.Response) {
	// EncodeResponse sizes its buffer for the worst case; keep an exact copy.
	enc := keystore.EncodeResponse(resp)
	answer := make([]byte, len(enc))
	copy(answer, enc)
	grow := int64(len(answer))
	e.state = keystore.StateCompleted
	e.answer = answer
	e.leaseEnd = 0
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
	e, err := s.holder(sh, k, token, s.now())
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
	now := s.now()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, err := s.holder(sh, k, token, now)
	if err != nil {
		return time.Time{}, err
	}
	end := min(now+lease, e.expires)
	e.leaseEnd = max(e.leaseEnd, end)
	return s.at(e.leaseEnd), nil
}

// Get implements [keystore.Store].
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return keystore.Record{}, err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.live(sh, k, s.now())
	if e == nil {
		return keystore.Record{}, keystore.ErrNotFound
	}
	return s.record(k, e)
}

// record snapshots e. The caller holds e's shard lock.
func (s *Store) record(k keystore.Key, e *entry) (keystore.Record, error) {
	rec := keystore.Record{
		Key:         k,
		State:       e.state,
		Fingerprint: e.fp,
		Route:       e.route,
		Token:       e.token,
		Claimed:     s.at(e.claimed),
		Expires:     s.at(e.expires),
	}
	if e.state == keystore.StateInFlight {
		rec.LeaseEnd = s.at(e.leaseEnd)
	}
	if e.answer != nil {
		resp, err := keystore.DecodeResponse(e.answer)
		if err != nil {
			return keystore.Record{}, err
		}
		rec.Response = resp
	}
	return rec, nil
}

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	now := s.now()
	cutoff := now - olderThan
	var out []keystore.Record
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.state == keystore.StateInFlight && now < e.expires && e.claimed <= cutoff {
				rec, _ := s.record(k, e) // in flight: no answer to decode
				out = append(out, rec)
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
	e := s.live(sh, k, s.now())
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
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if now >= e.expires {
				s.drop(sh, k, e)
			}
		}
		sh.mu.Unlock()
	}
}
