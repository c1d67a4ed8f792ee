package limiter

import (
	"time"
)

// DenyCache remembers, per client key, until when a limiter whose state
// lives elsewhere (the Redis limiter) refuses that client, so that the
// client's requests in that time are refused here without asking again.
//
// It is exact for the limiters of this package: a refused client's bucket
// only drains with time, and a blocked window client stays blocked until its
// block ends, so every request before the refusal's RetryAfter would be
// refused anyway. The caller records the RetryAfter measured from a time no
// later than the refusal was decided (the time it sent the question), so
// the cache never refuses longer than the shared limiter would.
//
// Memory is bounded as in [Limiter]: at most capacity entries, an entry
// whose time has passed is dropped first, and only when none has, the entry
// closest to its end is evicted (the client's next request then asks the
// shared limiter, which still refuses it: an eviction costs a round trip,
// never a wrong answer).
//
// A DenyCache is safe for concurrent use. Checking a client that is not in
// the cache takes one shard lock and one map lookup, and allocates nothing.
type DenyCache struct {
	tab   *table[int64] // until when the client is refused, ns since epoch
	epoch time.Time
}

// NewDenyCache returns a DenyCache holding at most capacity clients (0
// means [DefaultMaxClients]). A positive sweepInterval starts a goroutine
// that drops ended entries at that interval until [DenyCache.Close].
func NewDenyCache(capacity int, sweepInterval time.Duration) (*DenyCache, error) {
	switch {
	case capacity < 0:
		return nil, errOptions("max clients %d is negative", capacity)
	case sweepInterval < 0:
		return nil, errOptions("sweep interval %v is negative", sweepInterval)
	}
	c := &DenyCache{
		tab:   newTable(maxClients(capacity), func(until int64) int64 { return until }),
		epoch: time.Now(),
	}
	if sweepInterval > 0 {
		c.tab.startSweeper(sweepInterval, c.nanos)
	}
	return c, nil
}

func (c *DenyCache) nanos(now time.Time) int64 {
	return min(max(int64(now.Sub(c.epoch)), -1<<62), 1<<62)
}

// Denied reports whether k is refused at now, and for how much longer.
func (c *DenyCache) Denied(k Key, now time.Time) (wait time.Duration, denied bool) {
	t := c.nanos(now)
	sh := c.tab.shard(k)
	sh.mu.Lock()
	until, ok := sh.m[k]
	if ok && until <= t {
		delete(sh.m, k)
		ok = false
	}
	sh.mu.Unlock()
	if !ok {
		return 0, false
	}
	return time.Duration(until - t), true
}

// Deny records that k is refused for wait from now. A shorter wait than one
// already recorded changes nothing. A wait ≤ 0 records nothing.
func (c *DenyCache) Deny(k Key, now time.Time, wait time.Duration) {
	if wait <= 0 {
		return
	}
	t := c.nanos(now)
	until := t + min(int64(wait), 1<<62)
	sh := c.tab.shard(k)
	sh.mu.Lock()
	if old, ok := sh.m[k]; ok {
		if until > old {
			sh.m[k] = until
			c.tab.updated(sh, until)
		}
	} else {
		c.tab.insert(sh, k, until, t)
	}
	sh.mu.Unlock()
}

// Len returns the number of clients held. It locks every shard in turn.
func (c *DenyCache) Len() int { return c.tab.len() }

// Evictions returns how many entries were dropped before their end to make
// room for new ones.
func (c *DenyCache) Evictions() uint64 { return c.tab.evicted() }

// Close stops the sweeper, if one was started, and waits for it. It is
// idempotent and returns nil; the cache still answers after Close.
func (c *DenyCache) Close() error {
	c.tab.close()
	return nil
}
