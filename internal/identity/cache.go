package identity

import (
	"crypto/sha256"
	"sync"
	"sync/atomic"
	"time"
)

// cacheEntry is a verified token's verdict: the hash of its claims, valid
// until until (unix nanos) while the key set of generation gen is in force.
type cacheEntry struct {
	until  int64
	gen    uint64
	claims [sha256.Size]byte
}

// tokenCache maps a token's SHA-256 to its verdict. It holds at most max
// entries: a full cache evicts an expired entry among the first few it looks
// at, else an arbitrary one (Go's map iteration starts at a random place),
// so an insert costs O(1) and a flood of valid tokens can only make the
// cache colder, never larger.
type tokenCache struct {
	mu     sync.Mutex // protects m
	m      map[[sha256.Size]byte]cacheEntry
	max    int
	hits   atomic.Uint64
	misses atomic.Uint64
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{m: make(map[[sha256.Size]byte]cacheEntry, min(max, 1024)), max: max}
}

func (c *tokenCache) get(id [sha256.Size]byte, gen uint64, now time.Time) ([sha256.Size]byte, bool) {
	c.mu.Lock()
	e, ok := c.m[id]
	if ok && (e.gen != gen || now.UnixNano() >= e.until) {
		delete(c.m, id)
		ok = false
	}
	c.mu.Unlock()
	if !ok {
		c.misses.Add(1)
		return [sha256.Size]byte{}, false
	}
	c.hits.Add(1)
	return e.claims, true
}

func (c *tokenCache) put(id [sha256.Size]byte, e cacheEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[id]; !ok && len(c.m) >= c.max {
		c.evictLocked(now.UnixNano())
	}
	c.m[id] = e
}

// evictLocked removes one entry: the first expired (or soonest to expire)
// among up to 8 looked at.
func (c *tokenCache) evictLocked(now int64) {
	var victim [sha256.Size]byte
	best := int64(-1)
	n := 0
	for id, e := range c.m {
		if best < 0 || e.until < best {
			victim, best = id, e.until
		}
		if n++; n == 8 || e.until <= now {
			break
		}
	}
	if best >= 0 {
		delete(c.m, victim)
	}
}

func (c *tokenCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
