package budget

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

// eagerBytes is the largest buffer [Budget.ReadBody] allocates (and charges)
// before the bytes that fill it have arrived: a body whose Content-Length is
// at most eagerBytes is read into one buffer of exactly that size, one
// allocation. A larger or chunked body starts with eagerBytes and doubles as
// bytes arrive (up to the Content-Length, or the limit), each growth charged
// before it is made.
const eagerBytes = 16 << 10

// ReadOptions says how [Budget.ReadBody] reads one body. The zero value
// reads with no limit but the budget, and no deadline.
type ReadOptions struct {
	// Limit is max_body_bytes: a longer body fails with [ErrTooLarge].
	// Zero or negative means no limit but the budget.
	Limit int64
	// Deadline is when the whole body must have arrived: the end of the
	// request's headers plus request_body_timeout. Zero means none. A body
	// not complete at Deadline fails with [ErrTimeout].
	Deadline time.Time
	// Writer, when set, is the request's ResponseWriter: the connection's
	// read deadline is set to Deadline through [http.ResponseController]
	// while the body is read (so a stalled read ends at Deadline), and
	// cleared afterwards (so the server's background read cannot time out
	// while the upstream works; idemgate's servers set no ReadTimeout).
	// Without it, the deadline is checked after each read returns, which
	// stops a trickling client but not one that stalls.
	Writer http.ResponseWriter
	// Now is the clock checked against Deadline. Nil means time.Now.
	Now func() time.Time
	// DropOnError leaves the request's body as it was when the read fails,
	// and drops what was read: for a caller that forwards nothing then
	// (enforce mode). Without it, what was read is put back in front of
	// the rest for observe mode, no longer charged: a refused body must not
	// stay reachable from its request, uncharged, while the server answers
	// and closes the connection (issue 28: the heap with many clients).
	DropOnError bool
}

// A Body is a request body read whole and held against a [Budget]. It is an
// [io.ReadCloser] over the bytes, to put back as the request's body for the
// upstream (it has no GetBody, so a Transport can never resend it), and it is
// the hold: [Body.Free] gives back every byte charged for it, the
// decoded and derived buffers included.
//
// A Body belongs to one request's goroutine; its methods are not safe for
// concurrent use.
type Body struct {
	bytes.Reader
	buf    []byte
	budget *Budget
	key    limiter.Key
	held   int64   // bytes charged to budget for key, not yet given back
	probe  [1]byte // reads one byte past a full buffer, without an allocation
	over   int     // on error: probe[:over] was read after buf
	cause  error   // on error: the failed read's own error, if one failed
}

// Bytes returns the body's bytes. They stay valid after Free (the
// garbage collector frees them), but must then no longer be counted on by
// anything long-lived.
func (b *Body) Bytes() []byte { return b.buf }

// Len returns the body's length in bytes.
func (b *Body) Len() int { return len(b.buf) }

// Held returns the bytes charged for b and not yet given back.
func (b *Body) Held() int64 { return b.held }

// Close does nothing: the bytes stay readable until Free.
func (*Body) Close() error { return nil }

// Charge charges n more bytes to b's client, for a buffer derived from the
// body (a canonicalizer's working memory). It returns [ErrOverloaded] and
// charges nothing when the budget or the client's share would go over. The
// bytes are given back by [Body.Free].
func (b *Body) Charge(n int64) error {
	if err := b.budget.Charge(b.key, n); err != nil {
		return err
	}
	b.held += max(n, 0)
	return nil
}

// Uncharge gives back n of the bytes charged with [Body.Charge], once the
// derived buffer they paid for is dropped (a canonical form, once hashed).
// It never gives back more than b holds.
func (b *Body) Uncharge(n int64) {
	n = min(n, b.held)
	if n > 0 {
		b.budget.Refund(b.key, n)
		b.held -= n
	}
}

// Free gives back every byte charged for b. It is idempotent. Call it
// when the request is done with the body and everything derived from it.
func (b *Body) Free() {
	if b.held > 0 {
		b.budget.Refund(b.key, b.held)
		b.held = 0
	}
}

// ReadBody reads r's body whole for client k, within opt.Limit, the budget
// and opt.Deadline, and puts the read bytes back as r.Body (with
// r.ContentLength set and r.GetBody nil) for the upstream. The caller must
// call [Body.Free] on the returned Body when the request is done.
//
// On error, r.Body is replaced, when anything was read, by a body that
// reads the bytes already read, then the rest of the original body (or,
// after a failed read, the same failure again): observe mode forwards the
// request as it came. Those bytes are no longer charged. Enforce mode
// answers the error and forwards nothing.
//
// Memory is charged as bytes arrive (see eagerBytes), never from the
// Content-Length. A Content-Length over opt.Limit fails at once, reading
// nothing. On error, nothing stays charged and r.Body is left as it was
// (partly read). The error wraps [ErrTooLarge], [ErrOverloaded],
// [ErrTimeout] or [ErrInvalid].
//
// A body of known length up to eagerBytes costs two allocations: its
// buffer and the Body.
func (b *Budget) ReadBody(k limiter.Key, r *http.Request, opt *ReadOptions) (*Body, error) {
	body := &Body{budget: b, key: k}
	var src io.Reader
	if r.Body != nil && r.Body != http.NoBody {
		src = r.Body
	}
	if err := body.read(src, r.ContentLength, opt); err != nil {
		if src != nil && (opt == nil || !opt.DropOnError) && (len(body.buf) > 0 || body.over > 0 || errors.Is(err, ErrInvalid) || errors.Is(err, ErrTimeout)) {
			r.Body = body.rest(r.Body, err)
		}
		return nil, err
	}
	body.Reset(body.buf)
	r.Body = body
	r.ContentLength = int64(len(body.buf))
	r.GetBody = nil
	return body, nil
}

// Read reads src whole for client k, as [Budget.ReadBody] does but without
// a request: length is the announced length (-1 when unknown). The returned
// Body reads the bytes from the start.
func (b *Budget) Read(k limiter.Key, src io.Reader, length int64, opt *ReadOptions) (*Body, error) {
	body := &Body{budget: b, key: k}
	if err := body.read(src, length, opt); err != nil {
		return nil, err
	}
	body.Reset(body.buf)
	return body, nil
}

// read fills b.buf from src (nil: empty). On error it gives everything back.
func (b *Body) read(src io.Reader, length int64, opt *ReadOptions) error {
	var o ReadOptions
	if opt != nil {
		o = *opt
	}
	limit := o.Limit
	if limit <= 0 {
		limit = 1<<63 - 1
	}
	if length > limit {
		return ErrTooLarge
	}
	if src == nil || length == 0 {
		// http.Server's body for Content-Length: 0 is NoBody; a caller's
		// reader announced as empty is taken at its word.
		return nil
	}
	if !o.Deadline.IsZero() {
		if o.Writer != nil {
			rc := http.NewResponseController(o.Writer)
			if rc.SetReadDeadline(o.Deadline) == nil {
				defer func() { _ = rc.SetReadDeadline(time.Time{}) }()
			}
		}
		if o.Now == nil {
			o.Now = time.Now
		}
	}
	size := int64(eagerBytes)
	if length > 0 {
		size = min(size, length)
	}
	if err := b.fill(src, size, length, limit, &o); err != nil {
		b.Free() // b.buf keeps what was read, for rest
		return err
	}
	return nil
}

// rest returns a body that reads what read took from orig before it
// failed, then the rest of orig; after a read error, the same error again.
func (b *Body) rest(orig io.ReadCloser, err error) io.ReadCloser {
	var tail io.Reader = orig
	if b.cause != nil {
		tail = &failedReader{err: b.cause}
	}
	return &prefixedBody{Reader: io.MultiReader(bytes.NewReader(b.buf), bytes.NewReader(b.probe[:b.over]), tail), Closer: orig}
}

// prefixedBody is a request body whose start was read already.
type prefixedBody struct {
	io.Reader
	io.Closer
}

// failedReader replays a read error.
type failedReader struct{ err error }

func (f *failedReader) Read([]byte) (int, error) { return 0, f.err }

// fill reads src to its end into b.buf, starting with a buffer of size
// bytes and doubling it (never past want, when want > 0, nor past limit),
// charging each buffer before it is allocated and refunding the one it
// replaces after the copy. It reads one byte past a full buffer of limit
// bytes to tell a body of exactly limit bytes from a longer one.
func (b *Body) fill(src io.Reader, size, want, limit int64, o *ReadOptions) error {
	size = min(size, limit)
	if err := b.Charge(size); err != nil {
		return err
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			if int64(len(buf)) >= limit || (want > 0 && int64(len(buf)) >= want) {
				// Full at the limit (or the announced length): one more
				// byte means too large; EOF means done.
				n, err := src.Read(b.probe[:])
				if n > 0 {
					if int64(len(buf)) >= limit {
						b.buf, b.over = buf, 1
						return ErrTooLarge
					}
					// Longer than announced: only a caller's reader can do
					// this (net/http stops at Content-Length). Keep going.
					want = 0
				}
				if n == 0 {
					if done, err := b.settle(buf, err, o); done || err != nil {
						b.buf = buf
						return err
					}
					continue
				}
				nb := b.grow(buf, 1, want, limit)
				if nb == nil {
					b.buf, b.over = buf, 1
					return ErrOverloaded
				}
				buf = append(nb, b.probe[0])
				continue
			}
			nb := b.grow(buf, 0, want, limit)
			if nb == nil {
				b.buf = buf
				return ErrOverloaded
			}
			buf = nb
		}
		n, err := src.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if done, err := b.settle(buf, err, o); done || err != nil {
			b.buf = buf
			return err
		}
	}
}

// settle handles the outcome of one read: done at EOF (b.buf is then set),
// an error for a failed read or a passed deadline, neither to read on.
func (b *Body) settle(buf []byte, err error, o *ReadOptions) (done bool, _ error) {
	switch {
	case err == io.EOF:
		b.buf = buf
		return true, nil
	case err != nil:
		b.cause = err
		return false, readError(err)
	case !o.Deadline.IsZero() && !o.Now().Before(o.Deadline):
		return false, ErrTimeout
	}
	return false, nil
}

// grow returns buf with room for at least extra more bytes, in a new buffer
// of twice its capacity (capped at want when known, and at limit+extra),
// charged first; nil if the budget refuses.
func (b *Body) grow(buf []byte, extra, want, limit int64) []byte {
	c := int64(cap(buf))
	n := max(2*c, 512)
	if want > 0 && c < want {
		n = min(n, want)
	}
	n = min(n, limit)
	n = max(n, c+extra)
	if err := b.Charge(n); err != nil {
		return nil
	}
	nb := make([]byte, len(buf), n)
	copy(nb, buf)
	b.budget.Refund(b.key, c)
	b.held -= c
	return nb
}

// readError classifies a failed body read.
func readError(err error) error {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	default:
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
}
