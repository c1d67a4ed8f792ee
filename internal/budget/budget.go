package budget

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/idemgate/idemgate/limiter"
)

// Errors returned by this package; test them with errors.Is. Errors from
// reading or decoding a body wrap one of these and, where there is one, the
// cause.
var (
	// ErrOverloaded: the charge would take the budget, or the client's
	// share of it, over its cap. DESIGN.md maps it to 503 overloaded.
	ErrOverloaded = errors.New("budget: max_buffered_bytes exceeded")
	// ErrTooLarge: the body (after decoding, for [Body.Decode]) is longer
	// than the limit. 413 request_too_large.
	ErrTooLarge = errors.New("budget: body larger than max_body_bytes")
	// ErrTimeout: the body did not arrive before its deadline
	// (request_body_timeout). 408 request_timeout.
	ErrTimeout = errors.New("budget: body did not arrive within request_body_timeout")
	// ErrInvalid: the body could not be read (the client hung up or sent
	// a broken chunked encoding) or its Content-Encoding could not be
	// decoded (bad gzip). 400 request_body_invalid.
	ErrInvalid = errors.New("budget: body unreadable")
	// ErrUnsupportedEncoding: [Body.Decode] met a Content-Encoding it does
	// not decode (br, zstd, ...). Nothing is wrong with the request: the
	// caller fingerprints the raw bytes.
	ErrUnsupportedEncoding = errors.New("budget: unsupported content-encoding")
)

// A Budget counts the bytes that keyed request bodies hold, in total and per
// client address block ([limiter.Key]), and refuses a charge that would take
// either over its cap.
//
// A Budget is safe for concurrent use. Its memory is one map entry per
// client that holds bytes at the moment: an entry is removed when its
// client's count returns to zero, so the map is bounded by the number of
// requests in flight. Create it with [New]; the zero Budget refuses every
// non-zero charge.
type Budget struct {
	// Collection: bytes refunded since the last collection this Budget
	// started, and whether one runs (see Refund).
	freed      atomic.Int64
	collecting atomic.Bool

	mu        sync.Mutex // protects max, perClient, used, clients
	max       int64
	perClient int64
	used      int64                 // bytes held in total
	clients   map[limiter.Key]int64 // bytes held per client; no zero entries
}

// New returns a Budget of max bytes in total, of which one client may hold
// at most perClient. perClient <= 0 means max/4 (DESIGN.md's default of
// max_buffered_bytes_per_client); a perClient above max is capped at max.
// max <= 0 refuses every non-zero charge.
func New(max, perClient int64) *Budget {
	b := &Budget{clients: make(map[limiter.Key]int64)}
	b.SetLimits(max, perClient)
	return b
}

// SetLimits changes the caps, as [New] reads them (a config reload): the
// bytes already held stay held, and a charge is checked against the caps
// current when it is made.
func (b *Budget) SetLimits(max, perClient int64) {
	if max < 0 {
		max = 0
	}
	if perClient <= 0 {
		perClient = max / 4
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.max, b.perClient = max, min(perClient, max)
}

// Max returns the budget's total cap in bytes.
func (b *Budget) Max() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.max
}

// PerClient returns the cap in bytes that one client may hold.
func (b *Budget) PerClient() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.perClient
}

// Charge takes n bytes from the budget for client k, all or nothing: if the
// total or k's share would go over its cap, nothing is charged and Charge
// returns [ErrOverloaded]. Charging n <= 0 always succeeds and does nothing.
// Every successful Charge must be matched by a [Budget.Refund] of the same
// n and k.
func (b *Budget) Charge(k limiter.Key, n int64) error {
	if n <= 0 {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clients[k]
	if b.used+n > b.max || c+n > b.perClient || b.used+n < 0 || c+n < 0 {
		return ErrOverloaded
	}
	b.used += n
	if b.clients == nil {
		b.clients = make(map[limiter.Key]int64)
	}
	b.clients[k] = c + n
	return nil
}

// Refund gives back n bytes that client k was charged. Refunding more than
// k holds panics: it is a bookkeeping bug that would silently widen the
// budget.
func (b *Budget) Refund(k limiter.Key, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.clients[k]
	if c < n {
		panic("budget: refunded more than was charged")
	}
	b.used -= n
	if c == n {
		delete(b.clients, k)
	} else {
		b.clients[k] = c - n
	}
	b.refunded(n, b.max)
}

// collectFloor is the least garbage worth a collection of its own.
const collectFloor = 4 << 20

// refunded counts n bytes refunded. A freed body buffer is garbage
// until the garbage collector runs, and the Go runtime runs it only when
// the heap has grown by GOGC (100 %) of what was live at the last
// collection: with the budget full of big bodies turning over, the heap
// in use reached twice the budget and more, freed bodies waiting to be
// collected (issue 28). So once half the budget (at least collectFloor)
// has been refunded since the last one, a collection is started in the
// background, one at a time: the garbage of freed bodies stays within
// half the budget. Ordinary traffic (small bodies) refunds half the
// budget rarely and triggers nothing the runtime would not do anyway.
func (b *Budget) refunded(n, cap int64) {
	if b.freed.Add(n) < max(cap/2, collectFloor) || !b.collecting.CompareAndSwap(false, true) {
		return
	}
	go func() {
		b.freed.Store(0)
		runtime.GC()
		b.collecting.Store(false)
	}()
}

// Used returns the bytes held in total.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// UsedBy returns the bytes that client k holds.
func (b *Budget) UsedBy(k limiter.Key) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.clients[k]
}

// clientCount returns the number of clients holding bytes (for tests).
func (b *Budget) clientCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.clients)
}
