package limiter

import (
	"math"
	"time"
)

// window is a sliding log with a block, the route limit of DESIGN.md step 3:
// each passed request counts for exactly per; the request that would exceed
// requests is refused and starts a block, during which every request is
// refused; the count restarts from zero when the block ends. Refused requests
// are not counted.
//
// Every client's state is its own (times in its own log, its own block), so one
// client's block ending can change no other client's count; @nestjs/throttler
// 6.0–6.5 cancelled every client's pending decrements there (see
// TestWindowOtherClientsBlockForgetsNothing).
type window struct {
	tab      *table[*windowState]
	requests int
	per      int64 // ns
	block    int64 // ns
}

// windowState is one client's log and block. A state with no time in its log
// younger than per and no running block equals a fresh one.
type windowState struct {
	times        []int64 // ring of passed requests' times (ns), oldest at head, sorted
	head, n      int     // ring position of the oldest time; number of times
	blockedUntil int64   // ns; meaningful only when blocked
	blocked      bool
}

func newWindow(requests int, per, block time.Duration, maxClients int) *window {
	w := &window{
		requests: requests,
		per:      int64(per),
		block:    int64(block),
	}
	w.tab = newTable(maxClients, w.freshAt)
	return w
}

// freshAt returns when s's block has ended and its last counted request has
// left the window.
func (w *window) freshAt(s *windowState) int64 {
	at := int64(math.MinInt64)
	if s.blocked {
		at = s.blockedUntil
	}
	if s.n > 0 {
		at = max(at, s.newest()+w.per)
	}
	return at
}

func (w *window) allow(k Key, now int64) Decision {
	sh := w.tab.shard(k)
	sh.mu.Lock()
	s := sh.m[k]
	count := 0
	if s != nil {
		if s.blocked {
			if now < s.blockedUntil {
				sh.mu.Unlock()
				wait := time.Duration(s.blockedUntil - now)
				return Decision{Limit: w.requests, Reset: wait, RetryAfter: wait}
			}
			s.blocked = false
		}
		// A request at time t counts during [t, t+per).
		for s.n > 0 && s.times[s.head] <= now-w.per {
			s.pop()
		}
		count = s.n
	}
	if count >= w.requests {
		// s != nil here, since requests ≥ 1.
		s.blocked, s.blockedUntil = true, now+w.block
		s.head, s.n = 0, 0 // the count restarts from zero after the block
		w.tab.updated(sh, s)
		sh.mu.Unlock()
		wait := time.Duration(w.block)
		return Decision{Limit: w.requests, Reset: wait, RetryAfter: wait}
	}
	if s == nil {
		s = &windowState{times: make([]int64, min(w.requests, 4))}
		s.push(now, w.requests)
		w.tab.insert(sh, k, s, now)
	} else {
		t := now
		if s.n > 0 {
			t = max(t, s.newest()) // a late caller's clock reading: keep the log sorted
		}
		s.push(t, w.requests)
		w.tab.updated(sh, s)
	}
	remaining := w.requests - s.n
	reset := s.times[s.head] + w.per - now
	sh.mu.Unlock()
	return Decision{OK: true, Limit: w.requests, Remaining: remaining, Reset: time.Duration(reset)}
}

func (s *windowState) newest() int64 {
	return s.times[(s.head+s.n-1)%len(s.times)]
}

func (s *windowState) pop() {
	s.head = (s.head + 1) % len(s.times)
	s.n--
}

// push appends t, growing the ring (up to limit entries) when it is full.
func (s *windowState) push(t int64, limit int) {
	if s.n == len(s.times) {
		grown := make([]int64, min(max(2*len(s.times), 1), limit))
		for i := range s.n {
			grown[i] = s.times[(s.head+i)%len(s.times)]
		}
		s.times, s.head = grown, 0
	}
	s.times[(s.head+s.n)%len(s.times)] = t
	s.n++
}
