package compressed

import "sync"

// entryOverhead is what a frameCache entry costs beyond its frame and its
// body: the map's slot, the key's and the body's headers, the queue's slot.
const entryOverhead = 96

// frameCache keeps the bodies of the frames a Store opened last, so that
// the replays of one answer decode it once (issue 31: opening a 4 KB JSON
// answer takes about 6 µs, a sixth of a replay's CPU through the whole
// proxy). Decoding is a function of the frame's bytes alone, and an entry
// is found by those bytes, compared whole (the map's key is the frame): it
// can only ever answer for the very frame it was decoded from, whichever
// record or key holds it, so nothing needs invalidating. The bodies it
// returns are shared and read-only, as the stores' own answers are.
//
// It holds at most max bytes of frames and bodies (entryOverhead each
// besides), dropping the oldest first; an entry over a quarter of max is
// not kept. The zero value is an empty cache; max is set by its Store
// (Options.OpenCacheBytes) and may change between calls. Safe for
// concurrent use.
type frameCache struct {
	mu    sync.Mutex
	size  int64             // bytes held (see above)
	m     map[string][]byte // frame -> its body
	order []string          // the keys of m, oldest first
	hits  uint64
}

// get returns the body of frame, if the cache holds it.
func (c *frameCache) get(frame []byte) ([]byte, bool) {
	c.mu.Lock()
	body, ok := c.m[string(frame)] // no copy: the compiler looks the bytes up as they are
	if ok {
		c.hits++
	}
	c.mu.Unlock()
	return body, ok
}

// put keeps body as frame's, within max bytes.
func (c *frameCache) put(frame, body []byte, max int64) {
	cost := int64(len(frame) + len(body) + entryOverhead)
	if max <= 0 || cost > max/4 {
		return
	}
	key := string(frame) // the cache's own copy: the caller's frame may be reused
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok {
		return // decoded meanwhile by another caller: the same body
	}
	if c.m == nil {
		c.m = make(map[string][]byte)
	}
	c.m[key] = body
	c.order = append(c.order, key)
	c.size += cost
	c.shrink(max)
}

// shrink drops the oldest entries until at most max bytes are held.
// c.mu is held.
func (c *frameCache) shrink(max int64) {
	n := 0
	for c.size > max && n < len(c.order) {
		k := c.order[n]
		c.size -= int64(len(k) + len(c.m[k]) + entryOverhead)
		delete(c.m, k)
		c.order[n] = "" // let the key go
		n++
	}
	if n > 0 {
		c.order = c.order[n:]
		if len(c.order) == 0 {
			c.order = nil // the array, with its dropped head, goes too
		}
	}
}

// trim drops the oldest entries until at most max bytes are held (all of
// them for 0).
func (c *frameCache) trim(max int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shrink(max)
}

// stats returns the entries held, their bytes and the hits so far.
func (c *frameCache) stats() (entries int, bytes int64, hits uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.size, c.hits
}
