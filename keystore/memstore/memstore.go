// Package memstore is the embedded, in-process [keystore.Store]: idemgate's
// default backend for a single replica.
//
// It is bounded: at most MaxEntries records and about MaxBytes of stored
// answers; when either is reached, a new claim first reclaims every expired
// record (at most once a second by the store's clock), and fails with
// [keystore.ErrFull] (the proxy fails closed) only if there is still no
// room. Completing a claim is never refused for lack of room, so MaxBytes
// may be exceeded by at most the answers of the requests in flight at that
// moment: an answer that ran upstream is never dropped.
//
// Records expire by their retention. Expired records are invisible at once
// and their memory is reclaimed by a sweeper goroutine that [Store.Close]
// stops, or sooner by a claim that finds the store full.
//
// A released record is deleted, and its claim id is kept as a small
// tombstone until the record would have expired, so that a completion by
// the released claim is fenced rather than taken for a vanished record's
// (the Redis store keeps a released record instead). Tombstones count
// toward MaxBytes, not MaxEntries. The store never loses records, so it
// never resets (see [Store.EpochStatus]).
package memstore

import (
	"context"
	"errors"
	"fmt"
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

	entries   atomic.Int64 // records held
	bytes     atomic.Int64 // bytes accounted
	tokens    atomic.Uint64
	closed    atomic.Bool
	lastSweep atomic.Int64 // offset from base of the last sweep's start

	shards [numShards]shard

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

type shard struct {
	mu    sync.Mutex // protects m and tombs
	m     map[keystore.Key]*entry
	tombs map[tomb]time.Duration // released claim ids: when each tombstone ends
}

// tomb names the tombstone of a claim id released by ReleaseClaim.
type tomb struct {
	key keystore.Key
	id  keystore.ClaimID
}

// tombOverhead is the bytes accounted to a claim tombstone.
const tombOverhead = 96

// minSweepGap is the least time between two sweeps a full store runs for a
// claim, so that a flood of claims into a full store costs one pass over
// the records a second, not one per claim.
const minSweepGap = time.Second

// entry is one record, kept small: a completed record costs its encoded
// answer plus about 200 bytes (BenchmarkMemoryPerRecord). Times are offsets
// from the store's base time, so that comparisons use the monotonic clock
// when the clock provides one.
type entry struct {
	fp       keystore.Fingerprint
	claimID  keystore.ClaimID
	route    string
	token    uint64
	claimed  time.Duration
	leaseEnd time.Duration
	expires  time.Duration
	answer   []byte // completed: keystore.EncodeResponse of the answer
	size     int64
	state    keystore.State
	fv       keystore.FingerprintVersion
}

var (
	_ keystore.ClaimStore    = (*Store)(nil)
	_ keystore.Admin         = (*Store)(nil)
	_ keystore.EpochReporter = (*Store)(nil)
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
		s.shards[i].tombs = make(map[tomb]time.Duration)
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
	if opts.ClaimID.IsZero() {
		opts.ClaimID = keystore.NewClaimID()
	}
	opts.FingerprintVersion = opts.FingerprintVersion.Normalize()
	res, err := s.reserve(k, opts, false)
	if errors.Is(err, errSweep) {
		// Full: reclaim expired records (outside any shard lock), then try
		// once more.
		s.sweep()
		res, err = s.reserve(k, opts, true)
	}
	return res, err
}

// errSweep is reserve's answer when the store is full and a sweep is due.
var errSweep = errors.New("memstore: full, sweep due")

func (s *Store) reserve(k keystore.Key, opts keystore.ReserveOptions, swept bool) (keystore.Reservation, error) {
	now := s.now()
	sh := s.shard(k)
	sh.mu.Lock()
	if s.revoked(sh, k, opts.ClaimID, now) {
		sh.mu.Unlock()
		return keystore.Reservation{}, fmt.Errorf("memstore: reserve: claim %s was released before it arrived: %w", opts.ClaimID, keystore.ErrLeaseLost)
	}
	e := s.live(sh, k, now)
	if e != nil {
		if e.fv != opts.FingerprintVersion || e.fp != opts.Fingerprint {
			fv := e.fv
			sh.mu.Unlock()
			return keystore.Reservation{}, &keystore.MismatchError{Version: fv}
		}
		switch e.state {
		case keystore.StateCompleted:
			answer, fv := e.answer, e.fv
			sh.mu.Unlock()
			// Decoded outside the lock; answer is never modified.
			resp, err := keystore.DecodeResponse(answer)
			if err != nil {
				return keystore.Reservation{}, err
			}
			return keystore.Reservation{Response: resp, FingerprintVersion: fv}, nil
		case keystore.StateInFlight:
			defer sh.mu.Unlock()
			if now < e.leaseEnd {
				return keystore.Reservation{}, keystore.ErrInFlight
			}
			e.token = s.tokens.Add(1)
			e.claimID = opts.ClaimID
			e.claimed = now
			e.leaseEnd = now + opts.Lease
			return keystore.Reservation{Token: e.token, LeaseEnd: s.at(e.leaseEnd), Takeover: true, Claim: s.claim(e), FingerprintVersion: e.fv}, nil
		}
	}
	defer sh.mu.Unlock()
	size := int64(entryOverhead + len(opts.Route))
	if s.entries.Load() >= s.maxEntries || s.bytes.Load()+size > s.maxBytes {
		if !swept && now-time.Duration(s.lastSweep.Load()) >= minSweepGap {
			return keystore.Reservation{}, errSweep
		}
		return keystore.Reservation{}, keystore.ErrFull
	}
	e = &entry{
		state:    keystore.StateInFlight,
		fp:       opts.Fingerprint,
		fv:       opts.FingerprintVersion,
		claimID:  opts.ClaimID,
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
	return keystore.Reservation{Token: e.token, LeaseEnd: s.at(e.leaseEnd), Claim: s.claim(e), FingerprintVersion: e.fv}, nil
}

// claim describes e's current claim. The caller holds e's shard lock.
func (s *Store) claim(e *entry) keystore.Claim {
	return keystore.Claim{
		ID:                 e.claimID,
		Token:              e.token,
		Fingerprint:        e.fp,
		FingerprintVersion: e.fv,
		Route:              e.route,
		Claimed:            s.at(e.claimed),
		Expires:            s.at(e.expires),
	}
}

// revoked reports whether claim id has a live tombstone for k, dropping it
// when it has ended. The caller holds sh.mu.
func (s *Store) revoked(sh *shard, k keystore.Key, id keystore.ClaimID, now time.Duration) bool {
	end, ok := sh.tombs[tomb{k, id}]
	if ok && now >= end {
		s.dropTomb(sh, tomb{k, id})
		return false
	}
	return ok
}

// addTomb keeps a tombstone for t until end. The caller holds sh.mu.
func (s *Store) addTomb(sh *shard, t tomb, end time.Duration) {
	old, ok := sh.tombs[t]
	if !ok {
		s.bytes.Add(tombOverhead)
	}
	sh.tombs[t] = max(old, end)
}

// dropTomb removes a claim tombstone. The caller holds sh.mu.
func (s *Store) dropTomb(sh *shard, t tomb) {
	delete(sh.tombs, t)
	s.bytes.Add(-tombOverhead)
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
// record (its tokens come from one sequence for the whole store, so a later
// claim can never reuse a token) and keeps its claim id as a tombstone.
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
	s.release(sh, k, e)
	return nil
}

// release deletes e, keeping its claim id as a tombstone for as long as
// the record would have lived. The caller holds sh.mu.
func (s *Store) release(sh *shard, k keystore.Key, e *entry) {
	if !e.claimID.IsZero() {
		s.addTomb(sh, tomb{k, e.claimID}, e.expires)
	}
	s.drop(sh, k, e)
}

// CompleteClaim implements [keystore.ClaimStore]. A vanished record cannot
// happen here (the store loses nothing), but the semantics are the Redis
// store's: an absent record is created completed.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if c.ID.IsZero() || c.Token == 0 {
		return 0, errors.New("memstore: complete claim: claim without an id or token")
	}
	now := s.now()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.live(sh, k, now)
	if e == nil {
		if s.revoked(sh, k, c.ID, now) {
			return 0, keystore.ErrLeaseLost
		}
		expires := c.Expires.Sub(s.base)
		if now >= expires {
			return keystore.Expired, nil
		}
		// Never refused for room: the answer exists.
		e = &entry{
			state:   keystore.StateInFlight,
			fp:      c.Fingerprint,
			fv:      c.FingerprintVersion.Normalize(),
			claimID: c.ID,
			route:   c.Route,
			token:   c.Token,
			claimed: c.Claimed.Sub(s.base),
			expires: expires,
			size:    int64(entryOverhead + len(c.Route)),
		}
		sh.m[k] = e
		s.entries.Add(1)
		s.bytes.Add(e.size)
		s.complete(e, resp)
		return keystore.Recreated, nil
	}
	if e.claimID != c.ID || e.token != c.Token {
		return 0, keystore.ErrLeaseLost
	}
	if e.state == keystore.StateInFlight {
		s.complete(e, resp)
	}
	// Completed already: an earlier attempt stored it.
	return keystore.Completed, nil
}

// ReleaseClaim implements [keystore.ClaimStore].
func (s *Store) ReleaseClaim(ctx context.Context, k keystore.Key, id keystore.ClaimID, lease time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if id.IsZero() || lease <= 0 {
		return fmt.Errorf("memstore: release claim: id %s, lease %v: want an id and a lease > 0", id, lease)
	}
	now := s.now()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := s.live(sh, k, now); e != nil && e.state == keystore.StateInFlight && e.claimID == id {
		s.release(sh, k, e)
	}
	s.addTomb(sh, tomb{k, id}, now+lease)
	return nil
}

// EpochStatus implements [keystore.EpochReporter]: the memory store never
// loses its records, so it never resets.
func (s *Store) EpochStatus() keystore.EpochStatus { return keystore.EpochStatus{} }

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
		Key:                k,
		State:              e.state,
		Fingerprint:        e.fp,
		FingerprintVersion: e.fv,
		Route:              e.route,
		Token:              e.token,
		ClaimID:            e.claimID,
		Claimed:            s.at(e.claimed),
		Expires:            s.at(e.expires),
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
	s.release(sh, k, e)
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
	e.claimID = keystore.ClaimID{} // the holder's completion is fenced
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
	s.lastSweep.Store(int64(now))
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if now >= e.expires {
				s.drop(sh, k, e)
			}
		}
		for t, end := range sh.tombs {
			if now >= end {
				s.dropTomb(sh, t)
			}
		}
		sh.mu.Unlock()
	}
}
