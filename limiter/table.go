package limiter

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/tick"
)

// shardSize is the number of clients one shard aims to hold. When a full
// shard must make room it scans all its entries under its lock, so this
// bounds the cost of admitting a new client to a full limiter (about a
// microsecond) while leaving enough shards for parallel callers.
const (
	shardSize = 256
	maxShards = 4096
)

// sampleSize is the number of states a full shard compares when none of its
// states is fresh and it must evict one (as Redis's approximated eviction).
const sampleSize = 8

// table is a bounded map from client keys to limiter states, split into
// shards, each under its own mutex. It holds at most max entries in total.
//
// A state whose freshAt is ≤ now is equal to a fresh state (a full bucket, an
// empty window without a block) and may be dropped at any time without changing
// any decision. Only when a shard is full and none of its states is fresh does
// the table evict a state that is not fresh: the one closest to becoming fresh
// (exactly, when the shard was just scanned; otherwise among a random sample).
type table[S any] struct {
	shards    []shard[S]
	seed      [2]uint64
	freshAt   func(S) int64 // the time (ns) at which a state equals a fresh one
	evictions atomic.Uint64

	stop      chan struct{} // closed by close; nil when no sweeper runs
	done      chan struct{} // closed when the sweeper has returned
	closeOnce sync.Once
}

type shard[S any] struct {
	mu sync.Mutex // protects m, lowest
	m  map[Key]S  // nil until the first insert
	// lowest is at most the freshAt of every state in m, so that a full shard
	// with now < lowest knows, without a scan, that nothing in it is fresh.
	lowest int64
	max    int      // capacity of m, ≥ 1
	_      [32]byte // keep shards on separate cache lines
}

func newTable[S any](maxClients int, freshAt func(S) int64) *table[S] {
	n := (maxClients + shardSize - 1) / shardSize
	n = min(max(n, 1), maxShards)
	t := &table[S]{
		shards:  make([]shard[S], n),
		seed:    [2]uint64{rand.Uint64(), rand.Uint64()},
		freshAt: freshAt,
	}
	// Spread maxClients exactly, so the shards' capacities add up to it.
	for i := range t.shards {
		t.shards[i].max = maxClients / n
		if i < maxClients%n {
			t.shards[i].max++
		}
		t.shards[i].lowest = math.MaxInt64
	}
	return t
}

// shard returns the shard that holds k.
func (t *table[S]) shard(k Key) *shard[S] {
	i, _ := bits.Mul64(k.hash(t.seed), uint64(len(t.shards)))
	return &t.shards[i]
}

// updated records that s, held by sh, has changed. The caller holds sh.mu.
func (t *table[S]) updated(sh *shard[S], s S) {
	sh.lowest = min(sh.lowest, t.freshAt(s))
}

// insert stores s under k, which sh does not hold, making room first when sh
// is full. The caller holds sh.mu.
func (t *table[S]) insert(sh *shard[S], k Key, s S, now int64) {
	if sh.m == nil {
		sh.m = make(map[Key]S)
	}
	if len(sh.m) >= sh.max {
		t.makeRoom(sh, now)
	}
	sh.m[k] = s
	t.updated(sh, s)
}

// makeRoom drops every fresh state in sh; when there is none, it evicts the
// state closest to becoming fresh and counts the eviction. The caller holds
// sh.mu.
func (t *table[S]) makeRoom(sh *shard[S], now int64) {
	if now >= sh.lowest {
		// Something may be fresh. If nothing was (the bound was stale: its
		// state has been charged since), the scan evicts the closest exactly.
		t.scan(sh, now, true)
		return
	}
	// Nothing is fresh: evict the closest to fresh of a few states. Map
	// iteration starts at a random place.
	var victim Key
	best, i := int64(math.MaxInt64), 0
	for k, s := range sh.m {
		if at := t.freshAt(s); i == 0 || at < best {
			victim, best = k, at
		}
		if i++; i == sampleSize {
			break
		}
	}
	delete(sh.m, victim)
	t.evictions.Add(1)
}

// scan drops every fresh state in sh, recomputes sh.lowest, and returns how
// many states it dropped. When it dropped none and evict is set, it evicts the
// state closest to becoming fresh and counts it. The caller holds sh.mu.
func (t *table[S]) scan(sh *shard[S], now int64, evict bool) int {
	var victim Key
	lowest, second := int64(math.MaxInt64), int64(math.MaxInt64)
	freed := 0
	for k, s := range sh.m {
		at := t.freshAt(s)
		switch {
		case at <= now:
			delete(sh.m, k)
			freed++
		case at < lowest:
			victim, lowest, second = k, at, lowest
		case at < second:
			second = at
		}
	}
	sh.lowest = lowest
	if freed == 0 && evict && len(sh.m) > 0 {
		delete(sh.m, victim)
		t.evictions.Add(1)
		sh.lowest = second
	}
	return freed
}

// sweep drops every fresh state and returns how many it dropped.
func (t *table[S]) sweep(now int64) int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		if now >= sh.lowest {
			n += t.scan(sh, now, false)
		}
		sh.mu.Unlock()
	}
	return n
}

func (t *table[S]) evicted() uint64 { return t.evictions.Load() }

// len returns the number of tracked clients.
func (t *table[S]) len() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// startSweeper runs sweep every interval until close. now converts the wall
// clock into the table's time base.
func (t *table[S]) startSweeper(interval time.Duration, now func(time.Time) int64) {
	t.stop = make(chan struct{})
	t.done = make(chan struct{})
	go func() {
		defer close(t.done)
		tick.Every(t.stop, interval, func(c time.Time) { t.sweep(now(c)) })
	}()
}

// close stops the sweeper, if any, and waits for it. It is idempotent.
func (t *table[S]) close() {
	t.closeOnce.Do(func() {
		if t.stop != nil {
			close(t.stop)
			<-t.done
		}
	})
}
