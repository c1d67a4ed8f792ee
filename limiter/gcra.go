package limiter

import (
	"math"
	"time"
)

// gcra is a token bucket in the form nginx's limit_req uses: per client, a
// level (how full the bucket is, in units) and the time it was last charged.
// Every passed request adds one request's worth of units; the level drains at
// limit requests per period; a request passes when the level it would reach is
// at most the capacity. A refused request changes nothing.
//
// nginx keeps the level in milli-requests and the time in milliseconds
// (ngx_http_limit_req_module.c: excess = excess - rate*ms/1000 + 1000, clamped
// at 0, passing when excess ≤ burst*1000). Here the time is in nanoseconds and a
// request is worth perNs/g units where g = gcd(limit, perNs), so the level
// drains by limit/g units per nanosecond: every step is exact integer
// arithmetic, and on whole-millisecond arrivals the decisions are nginx's
// (see TestEdgeMatchesNginx).
type gcra struct {
	tab      *table[gcraState]
	capacity int   // requests an idle client may send at once
	unit     int64 // units one request adds
	drain    int64 // units drained per nanosecond, ≥ 1
	maxLevel int64 // capacity * unit
}

// gcraState is one client's bucket. The level is never 0 in a stored state:
// a drained bucket is fresh and may be dropped.
type gcraState struct {
	level int64 // units, at time last
	last  int64 // ns since the limiter's epoch
}

func newGCRA(limit int, per time.Duration, capacity, maxClients int) (*gcra, error) {
	unit, drain, err := gcraUnits(limit, per, capacity)
	if err != nil {
		return nil, err
	}
	l := &gcra{
		capacity: capacity,
		unit:     unit,
		drain:    drain,
		maxLevel: int64(capacity) * unit,
	}
	l.tab = newTable(maxClients, l.freshAt)
	return l, nil
}

// gcraUnits returns the time unit (ns/g) and the drain per unit (limit/g,
// g = gcd(limit, per)) of a bucket of limit per per, and an error when its
// capacity would overflow the level. limit must be > 0.
func gcraUnits(limit int, per time.Duration, capacity int) (unit, drain int64, err error) {
	perNs := int64(per)
	g := gcd(int64(limit), perNs)
	unit, drain = perNs/g, int64(limit)/g
	if int64(capacity) > math.MaxInt64/unit-1 {
		return 0, 0, errOptions("capacity %d is too large for one request per %v", capacity, time.Duration(unit/drain))
	}
	return unit, drain, nil
}

// freshAt returns when s's bucket is empty again.
func (l *gcra) freshAt(s gcraState) int64 {
	if l.drain == 1 {
		return s.last + s.level // the usual case: no division
	}
	return s.last + ceilDiv(s.level, l.drain)
}

// levelAt returns s's level at time now.
func (l *gcra) levelAt(s gcraState, now int64) int64 {
	d := now - s.last
	if d <= 0 {
		return s.level // a late caller's clock reading counts as "no time passed", as in nginx
	}
	if d >= s.level || d >= ceilDiv(s.level, l.drain) {
		return 0 // drained; also keeps drain*d from overflowing
	}
	return s.level - l.drain*d
}

func (l *gcra) allow(k Key, now int64) Decision {
	sh := l.tab.shard(k)
	sh.mu.Lock()
	s, found := sh.m[k]
	next := l.levelAt(s, now) + l.unit
	if next > l.maxLevel {
		sh.mu.Unlock()
		wait := time.Duration(ceilDiv(next-l.maxLevel, l.drain))
		return Decision{Limit: l.capacity, Reset: wait, RetryAfter: wait}
	}
	s.level = next
	if !found || now > s.last {
		s.last = now
	}
	if found {
		sh.m[k] = s
		l.tab.updated(sh, s)
	} else {
		l.tab.insert(sh, k, s, now)
	}
	sh.mu.Unlock()

	remaining := (l.maxLevel - next) / l.unit
	// Remaining grows when the level falls to (capacity-remaining-1) units.
	reset := ceilDiv(next-(int64(l.capacity)-remaining-1)*l.unit, l.drain)
	return Decision{OK: true, Limit: l.capacity, Remaining: int(remaining), Reset: time.Duration(reset)}
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// ceilDiv returns ⌈a/b⌉ for a ≥ 0, b > 0, without overflowing.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}
