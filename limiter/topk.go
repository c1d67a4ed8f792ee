package limiter

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
)

// Sizes of a [TopK]: topShards shards of topSlots slots each. 8 × 20 slots
// of 40 bytes are under 7 KiB per limiter, whatever the traffic.
const (
	topShards = 8
	topSlots  = 20
)

// TopK counts the clients a limiter sees most often, in fixed memory: the
// operator console's "busiest clients". It is the space-saving algorithm
// (Metwally, Agrawal and El Abbadi, "Efficient computation of frequent and
// top-k elements in data streams", 2005) over 8 shards, each under its own
// lock; a passed request takes a lock only when it is sampled (1 in 32).
//
// Each shard keeps 20 slots. A client already in a slot has its count
// raised; a new client takes an empty slot, or else the slot with the
// smallest count, inheriting that count as its possible over-count (Err).
// So a client is never under-counted, a count is at most Err too high, and
// every client that sent more than 1/20 of its shard's requests holds a
// slot (recordN; [TopK.Record] samples passed requests, which makes
// the request counts estimates, while refusals stay exact). Many addresses
// sending a request each (a flood from many IPs) only churn the smallest
// slots: they cannot push out a client that sent more than 1/20 of its
// shard's requests, and they never grow memory.
//
// Counts are since the TopK was made (the limiter's start, or the reload
// that rebuilt it). The zero TopK is not usable: build one with [NewTopK].
// A TopK is safe for concurrent use.
type TopK struct {
	seed   [2]uint64
	shards [topShards]topShard
}

type topShard struct {
	mu    sync.Mutex // protects n, slots
	n     int        // slots in use, filled from 0
	slots [topSlots]topSlot
	_     [40]byte // keep shards on separate cache lines
}

type topSlot struct {
	key     Key
	count   uint64 // requests counted, Err of them possibly another client's
	err     uint64 // the count inherited when the slot was taken over
	refused uint64 // requests refused since the client took the slot (exact)
}

// TopClient is one client in a [TopK]'s ranking.
type TopClient struct {
	// Key is the client: an address block, or a hashed identity.
	Key Key
	// Requests is an upper bound of the requests counted for the client;
	// Requests - Err is a lower bound. With [TopK.Record] the passed
	// requests in it are an estimate (sampled).
	Requests, Err uint64
	// Refused counts the client's refused requests since it took its slot:
	// a lower bound of all its refusals.
	Refused uint64
}

// NewTopK returns an empty TopK.
func NewTopK() *TopK {
	return &TopK{seed: [2]uint64{rand.Uint64(), rand.Uint64()}}
}

// passSample is how many passed requests one recorded pass stands for:
// [TopK.Record] counts one passed request in passSample, at random, as
// passSample requests, so that the hot path (a request that passes) costs
// one random number nearly always.
const passSample = 32

// Record counts one request of client k: every refused one, and passed
// ones by sampling (one in 32 at random, counted as 32), so that a passed
// request nearly always costs one random number and no lock. It allocates
// nothing and holds one shard's lock for a scan of at most 40 slots.
func (t *TopK) Record(k Key, refused bool) {
	if refused {
		t.recordN(k, 1, 1)
		return
	}
	if rand.Uint32()%passSample == 0 {
		t.recordN(k, passSample, 0)
	}
}

// recordN counts requests requests of client k, refused of them refused,
// exactly (no sampling).
func (t *TopK) recordN(k Key, requests, refused uint64) {
	i, _ := bits.Mul64(k.hash(t.seed), topShards)
	sh := &t.shards[i]
	sh.mu.Lock()
	for j := range sh.n {
		if s := &sh.slots[j]; s.key == k {
			s.count += requests
			s.refused += refused
			sh.mu.Unlock()
			return
		}
	}
	if sh.n < topSlots {
		sh.slots[sh.n] = topSlot{key: k, count: requests, refused: refused}
		sh.n++
		sh.mu.Unlock()
		return
	}
	low := 0
	for j := 1; j < topSlots; j++ {
		if sh.slots[j].count < sh.slots[low].count {
			low = j
		}
	}
	c := sh.slots[low].count
	sh.slots[low] = topSlot{key: k, count: c + requests, err: c, refused: refused}
	sh.mu.Unlock()
}

// Top returns at most n clients, the most requests first (ties: the most
// refusals, then by key, so that the order is stable). It locks each shard
// in turn: call it for the console, not per request.
func (t *TopK) Top(n int) []TopClient {
	var out []TopClient
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for _, s := range sh.slots[:sh.n] {
			out = append(out, TopClient{Key: s.key, Requests: s.count, Err: s.err, Refused: s.refused})
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b TopClient) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Refused, a.Refused); c != 0 {
			return c
		}
		return slices.Compare(a.Key.b[:], b.Key.b[:])
	})
	if len(out) > n {
		out = out[:max(n, 0)]
	}
	return out
}
