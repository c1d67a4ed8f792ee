// Package memstore is the embedded, in-process [keystore.Store]: idemgate's
// default backend for a single replica.
//
// It is bounded: at most MaxEntries records and about MaxBytes of stored
// answers; when either is reached, a new claim first reclaims every expired
// record (at most once a second by the store's clock), and fails with
// [keystore.ErrFull] (the proxy fails closed) only if there is still no
// room. It never evicts a record that has not expired. Completing a claim is
// never refused for lack of room, so MaxBytes may be exceeded by at most the
// answers of the requests in flight at that moment: an answer that ran
// upstream is never dropped.
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
//
// # Layout
//
// The store's cost must not grow with its size (issue 17), so nothing it
// holds per record is a pointer the garbage collector has to follow: each of
// its shards keeps an index map from key to slot number (keys and values
// without pointers, so the collector never scans it), the records' fixed
// fields in slabs of slots (arrays without pointers), and each record's
// route name and encoded answer in byte pages (an arena: 64 KiB pages
// filled in order, an answer over 16 KiB in a page of its own, bytes never
// rewritten, so that a replay decodes them without a copy). A page is
// freed when its last record goes; the sweeper compacts a shard whose pages
// hold more than twice its live bytes by moving the records of its emptiest
// pages. A heap of a million records is then a few thousand objects for the
// collector, whatever the answers hold. BenchmarkFilled and
// BenchmarkMemoryPerRecord measure it.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/tick"
	"github.com/idemgate/idemgate/keystore"
)

// Options configure a [Store]. Zero fields take the documented defaults.
type Options struct {
	// MaxEntries is the most records held at once. Default 1,000,000.
	MaxEntries int
	// MaxBytes bounds the bytes accounted to records (a fixed overhead per
	// record plus its route name and stored answer). Default 1 GiB.
	MaxBytes int64
	// SweepInterval is how often expired records are reclaimed. Default 1m.
	SweepInterval time.Duration
	// Now is the store's clock. Default time.Now; tests inject a fake one.
	Now func() time.Time
}

// EntryOverhead is the bytes accounted to a record beside its route name
// and encoded answer: its index slot with the key, and its slot of fixed
// fields. BenchmarkMemoryPerRecord measures the real cost.
const EntryOverhead = 192

const entryOverhead = EntryOverhead

const numShards = 64

// Store is the in-memory key store. It is safe for concurrent use. Create it
// with [New].
type Store struct {
	maxEntries atomic.Int64 // SetLimits changes them
	maxBytes   atomic.Int64
	clock      func() time.Time
	base       time.Time // entries keep times as offsets from base

	entries   atomic.Int64 // records held
	bytes     atomic.Int64 // bytes accounted
	tokens    atomic.Uint64
	closed    atomic.Bool
	lastSweep atomic.Int64 // offset from base of the last sweep's start

	shards [numShards]shard
	probes probeTable // reconcile probes' leases and states (probe.go)

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// slabLen is the number of slots in one slab.
const slabLen = 256

type shard struct {
	mu    sync.Mutex // protects everything below
	index map[keystore.Key]uint32
	slabs []*[slabLen]entry
	free  []uint32               // unused slot numbers
	tombs map[tomb]time.Duration // released claim ids: when each tombstone ends
	arena arena
}

// slot returns slot i. The caller holds sh.mu.
func (sh *shard) slot(i uint32) *entry { return &sh.slabs[i/slabLen][i%slabLen] }

// get returns k's slot number and entry, expired or not.
func (sh *shard) get(k keystore.Key) (uint32, *entry) {
	i, ok := sh.index[k]
	if !ok {
		return 0, nil
	}
	return i, sh.slot(i)
}

// add stores e under k, with route and answer as its data. The caller holds
// sh.mu.
func (sh *shard) add(k keystore.Key, e entry, route string, answer []byte) *entry {
	var i uint32
	if n := len(sh.free); n > 0 {
		i = sh.free[n-1]
		sh.free = sh.free[:n-1]
	} else {
		i = uint32(len(sh.slabs) * slabLen)
		sh.slabs = append(sh.slabs, new([slabLen]entry))
		for j := uint32(slabLen - 1); j > 0; j-- {
			sh.free = append(sh.free, i+j)
		}
	}
	p := sh.slot(i)
	*p = e
	sh.setData(p, route, answer)
	sh.index[k] = i
	return p
}

// remove deletes k's record in slot i. The caller holds sh.mu.
func (sh *shard) remove(k keystore.Key, i uint32) {
	p := sh.slot(i)
	sh.arena.release(p.page, p.routeLen+p.ansLen)
	*p = entry{}
	delete(sh.index, k)
	sh.free = append(sh.free, i)
}

// setData replaces e's route and answer bytes. route and answer may be e's
// own current bytes: they are copied before the old ones are released.
func (sh *shard) setData(e *entry, route string, answer []byte) {
	n := uint32(len(route) + len(answer))
	page, off, buf := sh.arena.alloc(n)
	copy(buf[copy(buf, route):], answer)
	sh.arena.release(e.page, e.routeLen+e.ansLen)
	e.page, e.off = page, off
	e.routeLen, e.ansLen = uint32(len(route)), uint32(len(answer))
}

// data returns e's bytes in the arena: valid until the shard lock is
// released.
func (sh *shard) data(e *entry) []byte { return sh.arena.bytes(e.page, e.off, e.routeLen+e.ansLen) }

// route returns a copy of e's route name.
func (sh *shard) route(e *entry) string { return string(sh.data(e)[:e.routeLen]) }

// answer returns e's encoded answer, nil if it has none: the arena's own
// bytes, which are never written again (see arena), so they may be read
// and decoded after the lock is released.
func (sh *shard) answer(e *entry) []byte {
	if e.ansLen == 0 {
		return nil
	}
	return sh.data(e)[e.routeLen:]
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

// entry is one record's fixed fields: no pointers, so that a slab of them
// is never scanned by the garbage collector. Its route name and encoded
// answer (keystore.EncodeResponse; ansLen 0 until completed) are
// routeLen+ansLen bytes at (page, off) in the shard's arena. Times are
// offsets from the store's base time, so that comparisons use the monotonic
// clock when the clock provides one.
type entry struct {
	fp       keystore.Fingerprint
	claimID  keystore.ClaimID
	token    uint64
	claimed  time.Duration
	leaseEnd time.Duration
	expires  time.Duration
	page     uint32
	off      uint32
	routeLen uint32
	ansLen   uint32
	state    keystore.State
	fv       keystore.FingerprintVersion
	sent     bool           // the sent mark (in flight); its info is the answer bytes
	cause    keystore.Cause // unknown only
}

// size is the bytes accounted to e.
func (e *entry) size() int64 { return entryOverhead + int64(e.routeLen) + int64(e.ansLen) }

var (
	_ keystore.UnknownStore  = (*Store)(nil)
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
		clock: opts.Now,
	}
	s.SetLimits(opts.MaxEntries, opts.MaxBytes)
	s.base = s.clock()
	for i := range s.shards {
		s.shards[i].index = make(map[keystore.Key]uint32)
		s.shards[i].tombs = make(map[tomb]time.Duration)
		s.shards[i].arena.cur = noPage
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

func (s *Store) check(ctx context.Context) error { return keystore.CheckOpen(ctx, s.closed.Load()) }

// live returns the unexpired entry for k, nil if none. The caller holds
// sh.mu; the entry is valid while it does.
func (s *Store) live(sh *shard, k keystore.Key, now time.Duration) *entry {
	i, e := sh.get(k)
	if e == nil {
		return nil
	}
	if now >= e.expires {
		s.drop(sh, k, i, e)
		return nil
	}
	return e
}

// drop removes k's entry e in slot i. The caller holds sh.mu.
func (s *Store) drop(sh *shard, k keystore.Key, i uint32, e *entry) {
	size := e.size()
	sh.remove(k, i)
	s.entries.Add(-1)
	s.bytes.Add(-size)
}

// dropKey removes k's entry. The caller holds sh.mu.
func (s *Store) dropKey(sh *shard, k keystore.Key) {
	if i, e := sh.get(k); e != nil {
		s.drop(sh, k, i, e)
	}
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
		case keystore.StateUnknown:
			sh.mu.Unlock()
			return keystore.Reservation{}, &keystore.UnknownError{}
		case keystore.StateCompleted:
			answer, fv, ttl := sh.answer(e), e.fv, e.expires-now
			sh.mu.Unlock()
			// Decoded outside the lock: the arena's bytes never change.
			resp, err := keystore.DecodeResponse(answer)
			if err != nil {
				return keystore.Reservation{}, err
			}
			return keystore.Reservation{Response: resp, FingerprintVersion: fv, TTL: ttl}, nil
		case keystore.StateInFlight:
			defer sh.mu.Unlock()
			if now < e.leaseEnd {
				return keystore.Reservation{}, keystore.ErrInFlight
			}
			if e.sent && opts.Hold {
				// It reached the upstream, and its holder is gone: its
				// outcome is unknown (DESIGN.md, Unknown outcomes).
				info, err := decodeInfo(sh.answer(e))
				s.markUnknown(e, keystore.CauseLapsed)
				if err != nil {
					return keystore.Reservation{}, err
				}
				return keystore.Reservation{}, &keystore.UnknownError{Marked: true, Info: info}
			}
			if e.sent {
				// A takeover: the new claim has not been sent.
				before := e.size()
				sh.setData(e, unsafeRoute(sh, e), nil)
				s.bytes.Add(e.size() - before)
				e.sent = false
			}
			e.token = s.tokens.Add(1)
			e.claimID = opts.ClaimID
			e.claimed = now
			e.leaseEnd = now + opts.Lease
			return keystore.Reservation{Token: e.token, LeaseEnd: s.at(e.leaseEnd), Takeover: true, Claim: s.claim(e, sh.route(e)), FingerprintVersion: e.fv}, nil
		}
	}
	defer sh.mu.Unlock()
	size := int64(entryOverhead + len(opts.Route))
	if s.entries.Load() >= s.maxEntries.Load() || s.bytes.Load()+size > s.maxBytes.Load() {
		if !swept && now-time.Duration(s.lastSweep.Load()) >= minSweepGap {
			return keystore.Reservation{}, errSweep
		}
		return keystore.Reservation{}, keystore.ErrFull
	}
	e = sh.add(k, entry{
		state:    keystore.StateInFlight,
		fp:       opts.Fingerprint,
		fv:       opts.FingerprintVersion,
		claimID:  opts.ClaimID,
		token:    s.tokens.Add(1),
		claimed:  now,
		leaseEnd: now + opts.Lease,
		expires:  now + opts.Retention,
	}, opts.Route, nil)
	s.entries.Add(1)
	s.bytes.Add(size)
	return keystore.Reservation{Token: e.token, LeaseEnd: s.at(e.leaseEnd), Claim: s.claim(e, opts.Route), FingerprintVersion: e.fv}, nil
}

// claim describes e's current claim, whose record's route is route. The
// caller holds e's shard lock.
func (s *Store) claim(e *entry, route string) keystore.Claim {
	return keystore.Claim{
		ID:                 e.claimID,
		Token:              e.token,
		Fingerprint:        e.fp,
		FingerprintVersion: e.fv,
		Route:              route,
		Claimed:            s.at(e.claimed),
		Expires:            s.at(e.expires),
	}
}

// revoked reports whether claim id has a live tombstone for k, dropping it
// when it has ended. The caller holds sh.mu.
func (s *Store) revoked(sh *shard, k keystore.Key, id keystore.ClaimID, now time.Duration) bool {
	if len(sh.tombs) == 0 {
		return false
	}
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

// whose says which claim's entry [Store.withClaim] acts on.
type whose uint8

const (
	// holderOf: k's in-flight entry under the token.
	holderOf whose = iota
	// ownerOf: holderOf, but an unknown record of the token's claim is its
	// too: its holder's late completion or release resolves it.
	ownerOf
	// anyHolder: k's in-flight entry whatever its token (the admin API).
	anyHolder
)

// withClaim runs fn, at the store's time now, on k's entry claimed as w
// says (token is ignored for anyHolder), under its shard's lock. It returns
// the context's error or ErrClosed first, ErrNotFound when k has no live
// entry and ErrLeaseLost when the entry is not claimed as w says.
func (s *Store) withClaim(ctx context.Context, k keystore.Key, token uint64, w whose, fn func(sh *shard, e *entry, now time.Duration)) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	e := s.live(sh, k, now)
	switch {
	case e == nil:
		return keystore.ErrNotFound
	case w != anyHolder && e.token != token,
		e.state != keystore.StateInFlight && (w != ownerOf || e.state != keystore.StateUnknown):
		return keystore.ErrLeaseLost
	}
	fn(sh, e, now)
	return nil
}

// markUnknown makes e unknown with cause. Its lease ends when it expires,
// as an older reader of the state would see it. The caller holds sh.mu.
func (s *Store) markUnknown(e *entry, cause keystore.Cause) {
	e.state, e.cause, e.leaseEnd = keystore.StateUnknown, cause, e.expires
}

// decodeInfo decodes a sent mark's info; nil for none.
func decodeInfo(b []byte) (*keystore.Response, error) {
	if b == nil {
		return nil, nil
	}
	return keystore.DecodeResponse(b)
}

// MarkSent implements [keystore.UnknownStore].
func (s *Store) MarkSent(ctx context.Context, k keystore.Key, token uint64, info *keystore.Response) error {
	enc := encode(info) // outside the lock
	defer enc.free()
	return s.withClaim(ctx, k, token, holderOf, func(sh *shard, e *entry, _ time.Duration) {
		before := e.size()
		sh.setData(e, unsafeRoute(sh, e), enc.b)
		s.bytes.Add(e.size() - before)
		e.sent = true
	})
}

// MarkUnknown implements [keystore.UnknownStore].
func (s *Store) MarkUnknown(ctx context.Context, k keystore.Key, token uint64, cause keystore.Cause) error {
	return s.withClaim(ctx, k, token, holderOf, func(_ *shard, e *entry, _ time.Duration) {
		s.markUnknown(e, cause)
	})
}

// Resolve implements [keystore.UnknownStore].
func (s *Store) Resolve(ctx context.Context, k keystore.Key, id keystore.ClaimID, resp *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	var enc *encoded
	if resp != nil {
		enc = encode(resp)
		defer enc.free()
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := s.live(sh, k, s.now())
	switch {
	case e == nil:
		return keystore.ErrNotFound
	case e.state != keystore.StateUnknown || e.claimID != id:
		return keystore.ErrLeaseLost
	case resp == nil:
		s.release(sh, k, e)
	default:
		s.complete(sh, e, enc.b)
	}
	return nil
}

// Unknown implements [keystore.UnknownStore].
func (s *Store) Unknown(ctx context.Context, limit int) ([]keystore.Record, error) {
	return s.list(ctx, limit, func(e *entry, _ time.Duration) bool { return e.state == keystore.StateUnknown })
}

// list returns the live records that keep accepts (at the store's time
// now), oldest claim first, at most limit of them (0: all). An unknown
// record's info is decoded; one that does not decode is listed without it.
func (s *Store) list(ctx context.Context, limit int, keep func(e *entry, now time.Duration) bool) ([]keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	now := s.now()
	var out []keystore.Record
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, j := range sh.index {
			e := sh.slot(j)
			if now < e.expires && keep(e, now) {
				rec, info := s.record(sh, k, e)
				if e.state == keystore.StateUnknown {
					rec.Info, _ = decodeInfo(info)
				}
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

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	enc := encode(resp) // outside the lock
	defer enc.free()
	return s.withClaim(ctx, k, token, ownerOf, func(sh *shard, e *entry, _ time.Duration) {
		s.complete(sh, e, enc.b)
	})
}

// complete stores the encoded answer enc in e. The caller holds sh.mu.
func (s *Store) complete(sh *shard, e *entry, enc []byte) {
	before := e.size()
	sh.setData(e, unsafeRoute(sh, e), enc)
	e.state = keystore.StateCompleted
	e.leaseEnd = 0
	e.sent, e.cause = false, 0
	s.bytes.Add(e.size() - before)
}

// encoded is an answer encoded into a pooled buffer: the arena copies it.
type encoded struct{ b []byte }

var encPool = sync.Pool{New: func() any { return &encoded{b: make([]byte, 0, 4096)} }}

func encode(resp *keystore.Response) *encoded {
	e := encPool.Get().(*encoded)
	e.b = keystore.AppendResponse(e.b[:0], resp)
	return e
}

func (e *encoded) free() {
	if cap(e.b) <= 64<<10 {
		encPool.Put(e)
	}
}

// unsafeRoute returns e's route name as a string sharing the arena's bytes,
// for setData to copy at once; it must not outlive the call.
func unsafeRoute(sh *shard, e *entry) string {
	b := sh.data(e)[:e.routeLen]
	if len(b) == 0 {
		return ""
	}
	return unsafeString(b)
}

// Release implements [keystore.Store]. The memory store deletes a released
// record (its tokens come from one sequence for the whole store, so a later
// claim can never reuse a token) and keeps its claim id as a tombstone.
func (s *Store) Release(ctx context.Context, k keystore.Key, token uint64) error {
	return s.withClaim(ctx, k, token, ownerOf, func(sh *shard, e *entry, _ time.Duration) {
		s.release(sh, k, e)
	})
}

// release deletes e, keeping its claim id as a tombstone for as long as
// the record would have lived. The caller holds sh.mu.
func (s *Store) release(sh *shard, k keystore.Key, e *entry) {
	if !e.claimID.IsZero() {
		s.addTomb(sh, tomb{k, e.claimID}, e.expires)
	}
	s.dropKey(sh, k)
}

// CompleteClaim implements [keystore.Store]. A vanished record cannot
// happen here (the store loses nothing), but the semantics are the Redis
// store's: an absent record is created completed.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if c.ID.IsZero() || c.Token == 0 {
		return 0, errors.New("memstore: complete claim: claim without an id or token")
	}
	enc := encode(resp) // outside the lock
	defer enc.free()
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
		e = sh.add(k, entry{
			state:   keystore.StateCompleted,
			fp:      c.Fingerprint,
			fv:      c.FingerprintVersion.Normalize(),
			claimID: c.ID,
			token:   c.Token,
			claimed: c.Claimed.Sub(s.base),
			expires: expires,
		}, c.Route, enc.b)
		s.entries.Add(1)
		s.bytes.Add(e.size())
		return keystore.Recreated, nil
	}
	if e.claimID != c.ID || e.token != c.Token {
		return 0, keystore.ErrLeaseLost
	}
	if e.state == keystore.StateInFlight || e.state == keystore.StateUnknown {
		s.complete(sh, e, enc.b) // an unknown record of this claim: its late answer resolves it
	}
	// Completed already: an earlier attempt stored it.
	return keystore.Completed, nil
}

// ReleaseClaim implements [keystore.Store].
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
	var end time.Time
	err := s.withClaim(ctx, k, token, holderOf, func(_ *shard, e *entry, now time.Duration) {
		e.leaseEnd = max(e.leaseEnd, min(now+lease, e.expires))
		end = s.at(e.leaseEnd)
	})
	return end, err
}

// Get implements [keystore.Store].
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return keystore.Record{}, err
	}
	sh := s.shard(k)
	sh.mu.Lock()
	e := s.live(sh, k, s.now())
	if e == nil {
		sh.mu.Unlock()
		return keystore.Record{}, keystore.ErrNotFound
	}
	rec, answer := s.record(sh, k, e)
	sh.mu.Unlock()
	if rec.State != keystore.StateCompleted {
		info, err := decodeInfo(answer)
		rec.Info = info
		return rec, err
	}
	return decodeRecord(rec, answer)
}

// record snapshots e, with its encoded answer (nil if it has none). The
// caller holds sh.mu.
func (s *Store) record(sh *shard, k keystore.Key, e *entry) (keystore.Record, []byte) {
	rec := keystore.Record{
		Key:                k,
		State:              e.state,
		Fingerprint:        e.fp,
		FingerprintVersion: e.fv,
		Route:              sh.route(e),
		Token:              e.token,
		ClaimID:            e.claimID,
		Claimed:            s.at(e.claimed),
		Expires:            s.at(e.expires),
	}
	if e.state == keystore.StateInFlight {
		rec.LeaseEnd = s.at(e.leaseEnd)
	}
	rec.Sent, rec.Cause = e.sent, e.cause
	return rec, sh.answer(e)
}

// decodeRecord sets rec.Response from answer, if there is one.
func decodeRecord(rec keystore.Record, answer []byte) (keystore.Record, error) {
	if answer != nil {
		resp, err := keystore.DecodeResponse(answer)
		if err != nil {
			return keystore.Record{}, err
		}
		rec.Response = resp
	}
	return rec, nil
}

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	return s.list(ctx, limit, func(e *entry, now time.Duration) bool {
		return e.state == keystore.StateInFlight && e.claimed <= now-olderThan
	})
}

// ForceRelease implements [keystore.Admin].
func (s *Store) ForceRelease(ctx context.Context, k keystore.Key) error {
	return s.withClaim(ctx, k, 0, anyHolder, func(sh *shard, e *entry, _ time.Duration) {
		s.release(sh, k, e)
	})
}

// ForceComplete implements [keystore.Admin].
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	enc := encode(resp) // outside the lock
	defer enc.free()
	return s.withClaim(ctx, k, 0, anyHolder, func(sh *shard, e *entry, _ time.Duration) {
		s.complete(sh, e, enc.b)
		e.claimID = keystore.ClaimID{} // the holder's completion is fenced
	})
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
	tick.Every(ctx.Done(), every, func(time.Time) { s.sweep() })
}

// sweep drops every expired record and compacts the shards whose arenas
// hold too much dead space, one shard at a time so that requests are never
// blocked for long.
func (s *Store) sweep() {
	now := s.now()
	s.lastSweep.Store(int64(now))
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for k, j := range sh.index {
			if e := sh.slot(j); now >= e.expires {
				s.drop(sh, k, j, e)
			}
		}
		for t, end := range sh.tombs {
			if now >= end {
				s.dropTomb(sh, t)
			}
		}
		sh.compact()
		sh.arena.trim()
		sh.mu.Unlock()
	}
	s.probes.mu.Lock()
	s.probes.sweep(now)
	s.probes.mu.Unlock()
}

// compact moves the records of the shard's emptiest pages to fresh ones
// when its pages hold more than twice its live bytes. The caller holds
// sh.mu.
func (sh *shard) compact() {
	victims := sh.arena.victims()
	if victims == nil {
		return
	}
	for _, j := range sh.index {
		e := sh.slot(j)
		if n := e.routeLen + e.ansLen; n > 0 && int(e.page) < len(victims) && victims[e.page] {
			page, off, buf := sh.arena.alloc(n)
			copy(buf, sh.data(e))
			sh.arena.release(e.page, n)
			e.page, e.off = page, off
		}
	}
}

// Limits returns the store's capacity: the most records and bytes it holds
// (Options.MaxEntries and MaxBytes with their defaults).
func (s *Store) Limits() (entries int, bytes int64) {
	return int(s.maxEntries.Load()), s.maxBytes.Load()
}

// SetLimits changes the store's capacity (a config reload); values <= 0
// leave a limit as it is. Records already held stay: a store over a
// lowered limit refuses new claims (ErrFull) until it is back under it.
func (s *Store) SetLimits(entries int, bytes int64) {
	if entries > 0 {
		s.maxEntries.Store(int64(entries))
	}
	if bytes > 0 {
		s.maxBytes.Store(bytes)
	}
}
