// Package replaycache is a bounded local cache of completed answers in
// front of a shared store (the Redis store): a replay it holds is answered
// without a round trip (issue 17).
//
// It is correct because a completed record never changes until it expires:
// the proxy's claims, completions and releases act on records in flight,
// and so do the operator repairs of [keystore.Admin]. An answer is cached
// only from a replay that the store served, with the record's remaining
// life ([keystore.Reservation.TTL]) counted from before the Reserve was
// sent, so that an entry never outlives its record, whatever the clocks of
// the store and of this process say (only their rates matter). A record
// whose backend reports no TTL is not cached.
//
// Operator repairs ([Store.ForceComplete], [Store.ForceRelease]) and
// [Store.Invalidate] drop the key here and publish it through the
// [Invalidator] to every replica's cache (the Redis store's Pub/Sub channel
// under its key prefix). When the subscription (re)connects, messages may
// have been missed, and the whole cache is dropped. A cache with an
// Invalidator caches nothing until its subscription is made, nor while it
// cannot be made (Redis down at start, or the channel refused to the ACL
// user): it would not hear another replica's repair.
//
// After a store loss (Redis flushed or failed over without the record), a
// cache still serves the answers it holds, until their records would have
// expired: they are answers that existed and ran upstream, the same
// requests' answers; the store no longer has them, so a replica without
// them in its cache claims the key anew. [Store.Purge] drops everything,
// for a caller that watches the store's epoch (keystore.EpochReporter).
package replaycache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// Invalidator carries invalidations between the replicas that share a
// store. The Redis store implements it ([redisstore.Store.PublishInvalidation]
// and SubscribeInvalidations).
type Invalidator interface {
	// PublishInvalidation tells every subscribed cache to drop k.
	PublishInvalidation(ctx context.Context, k keystore.Key) error
	// SubscribeInvalidations calls drop for every key published and resync
	// whenever the subscription is made or remade (messages may have been
	// lost before), until ctx is done. It returns when ctx is done, or an
	// error if it cannot subscribe at all.
	SubscribeInvalidations(ctx context.Context, drop func(keystore.Key), resync func()) error
}

// Options configure a [Store]. Zero fields take the documented defaults.
type Options struct {
	// MaxEntries is the most answers held. Default 100,000.
	MaxEntries int
	// MaxBytes bounds the bytes accounted to answers held (their
	// [keystore.Response.Size] plus EntryOverhead). Default 64 MiB.
	MaxBytes int64
	// Invalidator carries invalidations to the other replicas; nil: this
	// process is the only one (the cache then still drops keys it repairs
	// itself).
	Invalidator Invalidator
	// Now is the cache's clock. Default time.Now (monotonic).
	Now func() time.Time
}

// EntryOverhead is the bytes accounted to a cached answer beside its size.
const EntryOverhead = 256

const numShards = 16

// Store is a [keystore.Store] and [keystore.Admin] that answers
// replays from its cache and forwards everything else to the store it
// wraps ([keystore.Wrapper]): it declares only Reserve, the operator
// repairs (which invalidate) and Close. An unknown record is never cached,
// so the unknown-outcome operations have nothing to invalidate. Create it
// with [New]; it is safe for concurrent use.
type Store struct {
	keystore.Wrapper
	inv      Invalidator
	now      func() time.Time
	maxItems int64
	maxBytes int64

	items atomic.Int64
	bytes atomic.Int64
	// gen counts invalidations: an answer read before one is not cached
	// after it.
	gen    atomic.Uint64
	hits   atomic.Uint64
	misses atomic.Uint64
	resets atomic.Uint64
	closed atomic.Bool
	// heard is set while the cache hears invalidations: always without an
	// Invalidator, else from the subscription's first resync until
	// SubscribeInvalidations fails. add caches nothing while it is clear.
	heard atomic.Bool

	shards [numShards]shard

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

type shard struct {
	mu   sync.RWMutex
	m    map[keystore.Key]*item
	fifo []*item // insertion order, for eviction; removed items are skipped
	head int
}

type item struct {
	key     keystore.Key
	fp      keystore.Fingerprint
	fv      keystore.FingerprintVersion
	resp    *keystore.Response
	expires time.Time
	size    int64
	gone    bool
}

var (
	_ keystore.Store = (*Store)(nil)
	_ keystore.Admin = (*Store)(nil)
)

// New wraps inner. When opts.Invalidator is set, a goroutine subscribes to
// invalidations until Close. Close closes inner too.
func New(inner keystore.Store, opts Options) *Store {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 100_000
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 64 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Store{
		Wrapper:  keystore.Wrap(inner),
		inv:      opts.Invalidator,
		now:      opts.Now,
		maxItems: int64(opts.MaxEntries),
		maxBytes: opts.MaxBytes,
		done:     make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].m = make(map[keystore.Key]*item)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if s.inv == nil {
		s.heard.Store(true)
		close(s.done)
		return s
	}
	subscribed := func() {
		s.heard.Store(true)
		s.Purge() // messages may have been missed; after heard, so that what was cached before is gone
	}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			err := s.inv.SubscribeInvalidations(ctx, s.drop, subscribed)
			if err == nil || ctx.Err() != nil {
				return
			}
			// Nothing is heard meanwhile: cache nothing, and drop what
			// may go stale.
			s.heard.Store(false)
			s.Purge()
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return s
}

func (s *Store) shard(k keystore.Key) *shard { return &s.shards[k[1]%numShards] }

// Reserve implements [keystore.Store]: a replay of a cached answer with the
// same fingerprint is answered here; anything else goes to the store, and a
// replay it serves with a TTL is cached.
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	start := s.now()
	sh := s.shard(k)
	sh.mu.RLock()
	it := sh.m[k]
	sh.mu.RUnlock()
	fv := opts.FingerprintVersion.Normalize()
	if it != nil && start.Before(it.expires) && it.fp == opts.Fingerprint && it.fv == fv {
		if err := ctx.Err(); err != nil {
			return keystore.Reservation{}, err
		}
		if s.closed.Load() {
			return keystore.Reservation{}, keystore.ErrClosed
		}
		s.hits.Add(1)
		return keystore.Reservation{Response: it.resp, FingerprintVersion: it.fv, TTL: it.expires.Sub(start)}, nil
	}
	s.misses.Add(1)
	gen := s.gen.Load()
	res, err := s.Wrapper.Reserve(ctx, k, opts)
	if err == nil && res.Response != nil && res.TTL > 0 {
		s.add(k, gen, &item{
			key:     k,
			fp:      opts.Fingerprint,
			fv:      res.FingerprintVersion.Normalize(),
			resp:    res.Response,
			expires: start.Add(res.TTL),
			size:    int64(res.Response.Size()) + EntryOverhead,
		})
	}
	return res, err
}

// add caches it unless an invalidation came since gen was read.
func (s *Store) add(k keystore.Key, gen uint64, it *item) {
	if it.size > s.maxBytes {
		return
	}
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s.gen.Load() != gen || !s.heard.Load() {
		return
	}
	if old := sh.m[k]; old != nil {
		s.unlink(sh, old)
	}
	// Make room: the oldest entries of this shard go first (FIFO); a shard
	// with nothing left to evict leaves the answer uncached.
	for s.items.Load() >= s.maxItems || s.bytes.Load()+it.size > s.maxBytes {
		if !s.evictOldest(sh) {
			return
		}
	}
	sh.m[k] = it
	sh.fifo = append(sh.fifo, it)
	s.items.Add(1)
	s.bytes.Add(it.size)
}

// evictOldest drops the shard's oldest entry. The caller holds sh.mu.
func (s *Store) evictOldest(sh *shard) bool {
	for sh.head < len(sh.fifo) {
		it := sh.fifo[sh.head]
		sh.fifo[sh.head] = nil
		sh.head++
		if !it.gone {
			s.unlink(sh, it)
			s.compactFIFO(sh)
			return true
		}
	}
	s.compactFIFO(sh)
	return false
}

// compactFIFO reclaims the queue's consumed front and removed entries. The
// caller holds sh.mu.
func (s *Store) compactFIFO(sh *shard) {
	if sh.head < 1024 && sh.head*2 < len(sh.fifo) {
		return
	}
	live := sh.fifo[:0]
	for _, it := range sh.fifo[sh.head:] {
		if it != nil && !it.gone {
			live = append(live, it)
		}
	}
	clear(sh.fifo[len(live):])
	sh.fifo, sh.head = live, 0
}

// unlink removes it from the map. The caller holds sh.mu.
func (s *Store) unlink(sh *shard, it *item) {
	if it.gone {
		return
	}
	it.gone = true
	delete(sh.m, it.key)
	s.items.Add(-1)
	s.bytes.Add(-it.size)
}

// drop removes k from this cache only.
func (s *Store) drop(k keystore.Key) {
	s.gen.Add(1)
	sh := s.shard(k)
	sh.mu.Lock()
	if it := sh.m[k]; it != nil {
		s.unlink(sh, it)
		if len(sh.m) == 0 || len(sh.fifo) > 2*len(sh.m)+1024 {
			s.compactFIFO(sh)
		}
	}
	sh.mu.Unlock()
}

// Purge drops every cached answer (after a store reset, or when
// invalidations may have been missed).
func (s *Store) Purge() {
	s.gen.Add(1)
	s.resets.Add(1)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, it := range sh.m {
			s.unlink(sh, it)
		}
		clear(sh.fifo)
		sh.fifo, sh.head = sh.fifo[:0], 0
		sh.mu.Unlock()
	}
}

// Invalidate drops k here and publishes it to every replica's cache. The
// error is the publication's; the local entry is dropped in any case.
func (s *Store) Invalidate(ctx context.Context, k keystore.Key) error {
	s.drop(k)
	if s.inv == nil {
		return nil
	}
	if err := s.inv.PublishInvalidation(ctx, k); err != nil {
		return fmt.Errorf("replaycache: publish invalidation of %s: %w", k, err)
	}
	return nil
}

// Stats counts the cache's hits and misses (Reserves it answered, and those
// it forwarded), the answers and bytes it holds, and its purges.
type Stats struct {
	Hits, Misses, Purges uint64
	Entries, Bytes       int64
}

// Stats returns the cache's counters.
func (s *Store) Stats() Stats {
	return Stats{Hits: s.hits.Load(), Misses: s.misses.Load(), Purges: s.resets.Load(), Entries: s.items.Load(), Bytes: s.bytes.Load()}
}

// ForceRelease implements [keystore.Admin]; the key is then invalidated on
// every replica. The error is the store's, or else the publication's.
func (s *Store) ForceRelease(ctx context.Context, k keystore.Key) error {
	err := s.Wrapper.ForceRelease(ctx, k)
	return errors.Join(err, s.invalidateAfter(ctx, k, err))
}

// ForceComplete implements [keystore.Admin]; the key is then invalidated on
// every replica. The error is the store's, or else the publication's.
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	err := s.Wrapper.ForceComplete(ctx, k, resp)
	return errors.Join(err, s.invalidateAfter(ctx, k, err))
}

// invalidateAfter invalidates k after a repair, unless the store refused it
// with a sentinel or has no repairs (nothing changed).
func (s *Store) invalidateAfter(ctx context.Context, k keystore.Key, err error) error {
	if errors.Is(err, keystore.ErrNotFound) || errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, errors.ErrUnsupported) {
		s.drop(k)
		return nil
	}
	return s.Invalidate(ctx, k)
}

// Ping forwards to the wrapped store's Ping, if it has one.
func (s *Store) Ping(ctx context.Context) error {
	if p, ok := s.Unwrap().(interface{ Ping(context.Context) error }); ok {
		return p.Ping(ctx)
	}
	return nil
}

// Close stops the subscription and closes the wrapped store. It is
// idempotent.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.closed.Store(true)
		s.cancel()
		<-s.done
		err = s.Wrapper.Close()
	})
	return err
}
