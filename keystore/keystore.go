package keystore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/http"
	"time"
)

// Sentinel errors returned by every [Store]. Check them with [errors.Is]; a
// backend may wrap them with detail.
var (
	// ErrNotFound: no record exists for the key (never claimed, or expired).
	ErrNotFound = errors.New("keystore: record not found")
	// ErrInFlight: the key is claimed by a request whose lease is still
	// running, with the same fingerprint. The proxy answers 409 in progress.
	ErrInFlight = errors.New("keystore: request in flight")
	// ErrFingerprintMismatch: the key is in use (in flight or completed) by a
	// request with a different fingerprint. The record is left untouched.
	ErrFingerprintMismatch = errors.New("keystore: key reused with a different request")
	// ErrLeaseLost: the caller's fencing token is no longer the record's (the
	// record was taken over, released, completed or has expired).
	ErrLeaseLost = errors.New("keystore: lease lost")
	// ErrFull: the store is at capacity and refuses new records. The proxy
	// fails closed (503).
	ErrFull = errors.New("keystore: store full")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("keystore: store closed")
)

// Key identifies a record: the SHA-256 of the request's scope (tenant,
// identity header values and the client's idempotency key). See [NewKey].
type Key [sha256.Size]byte

// String returns the key in lower-case hex, the form stores and the admin API
// use.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// ParseKey parses the hex form returned by [Key.String].
func ParseKey(s string) (Key, error) {
	var k Key
	if len(s) != 2*len(k) {
		return k, errors.New("keystore: key must be 64 hex digits")
	}
	if _, err := hex.Decode(k[:], []byte(s)); err != nil {
		return k, errors.New("keystore: key must be 64 hex digits")
	}
	return k, nil
}

// NewKey hashes the parts of a scope into a Key. Each part is
// length-prefixed so that no two different part lists share an encoding.
func NewKey(parts ...string) Key {
	// One buffer, one Sum256: writing part by part through a hash.Hash
	// allocates. Typical scopes fit the array; longer ones grow the slice.
	var arr [512]byte
	b := arr[:0]
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	return Key(sha256.Sum256(b))
}

// Fingerprint is the SHA-256 of what makes two requests "the same request"
// (route, method, path, query and canonical body).
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in lower-case hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// State is the state of a record.
type State uint8

// Record states.
const (
	StateInFlight  State = iota + 1 // claimed; the request is running
	StateCompleted                  // the answer is stored
	StateReleased                   // released; a tombstone that keeps the token sequence
)

func (s State) String() string {
	switch s {
	case StateInFlight:
		return "in_flight"
	case StateCompleted:
		return "completed"
	case StateReleased:
		return "released"
	}
	return "unknown"
}

// Response is a stored upstream answer.
type Response struct {
	Status int
	// Header holds the end-to-end headers as the upstream sent them, minus
	// those the proxy drops. Nil when TooLarge.
	Header http.Header
	// Body is the whole body, byte for byte. Nil when TooLarge.
	Body []byte
	// TooLarge records that the answer was over the proxy's cap: it ran, but
	// cannot be replayed.
	TooLarge bool
}

// Size is the number of bytes the response accounts for in a store's
// capacity: its body plus its header names and values.
func (r *Response) Size() int {
	if r == nil {
		return 0
	}
	n := len(r.Body)
	for k, vs := range r.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v) + 4
		}
	}
	return n
}

// ReserveOptions says how to claim a key.
type ReserveOptions struct {
	// Fingerprint of the request.
	Fingerprint Fingerprint
	// Route is the route's name, kept for operators (admin API, logs).
	Route string
	// Lease is how long the claim holds without renewal. Must be > 0.
	Lease time.Duration
	// Retention is how long the record lives from this claim. Must be >= Lease.
	Retention time.Duration
}

// Reservation is the result of a successful [Store.Reserve].
type Reservation struct {
	// Response is non-nil when the key is already completed with the same
	// fingerprint: the caller replays it (or, if Response.TooLarge, refuses)
	// and runs nothing. Token and LeaseEnd are then zero. The Response may be
	// shared with the store and other callers: treat it as read-only.
	Response *Response
	// Token is the fencing token of a new claim, > 0. Pass it to Complete,
	// Release and Renew.
	Token uint64
	// LeaseEnd is when the claim's lease ends, by the store's clock.
	LeaseEnd time.Time
	// Takeover is true when the claim took over an in-flight record whose
	// lease had ended.
	Takeover bool
}

// Record is a snapshot of a stored record, for operators.
type Record struct {
	Key         Key
	State       State
	Fingerprint Fingerprint
	Route       string
	Token       uint64
	Claimed     time.Time // when the current claim was made
	LeaseEnd    time.Time // in flight only
	Expires     time.Time // when the record is dropped
	Response    *Response // completed only
}

// Store holds idempotency records. Implementations are safe for concurrent
// use by many goroutines (and, for shared backends, many processes): every
// method is one atomic step on the record. Every method returns ctx's error
// if ctx is done before the step is taken; any error other than the
// sentinels above means the store could not be reached or failed, and
// callers must fail closed.
type Store interface {
	// Reserve claims key for a request with opts.Fingerprint. Outcomes:
	//   - no record, or a released one: a new claim (Token > 0).
	//   - completed, same fingerprint: Reservation.Response is set.
	//   - any state but released, other fingerprint: ErrFingerprintMismatch.
	//   - in flight, same fingerprint, lease running: ErrInFlight.
	//   - in flight, same fingerprint, lease ended: a takeover with a higher
	//     Token (Takeover true); the old token stops working.
	//   - the store cannot take a new record: ErrFull.
	// A new claim's record expires opts.Retention after this call.
	Reserve(ctx context.Context, key Key, opts ReserveOptions) (Reservation, error)

	// Complete stores resp as the answer of the claim identified by token and
	// marks the record completed. It succeeds while the record is in flight
	// under token, even after the lease ended if nobody took over; otherwise
	// it returns ErrLeaseLost (or ErrNotFound if the record expired). The
	// record keeps its expiry.
	Complete(ctx context.Context, key Key, token uint64, resp *Response) error

	// Release gives up the claim identified by token: the next Reserve
	// claims anew. The backend either deletes the record or keeps it as a
	// StateReleased tombstone; either way the old token stops working.
	// ErrLeaseLost or ErrNotFound as for Complete.
	Release(ctx context.Context, key Key, token uint64) error

	// Renew extends the lease of the claim identified by token to lease from
	// now and returns its new end. ErrLeaseLost or ErrNotFound as for
	// Complete. Renew never extends a record's retention.
	Renew(ctx context.Context, key Key, token uint64, lease time.Duration) (time.Time, error)

	// Get returns the record for key, or ErrNotFound.
	Get(ctx context.Context, key Key) (Record, error)

	// Close releases the store's resources and stops its goroutines. It is
	// safe to call more than once; later calls return nil. Other methods
	// return ErrClosed after Close.
	Close() error
}

// Admin is what the admin API needs beyond [Store]: operator repairs that
// ignore fencing tokens. Backends implement it alongside Store.
type Admin interface {
	// InFlight lists up to limit in-flight records claimed at least olderThan
	// ago, oldest first.
	InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]Record, error)
	// ForceRelease releases an in-flight record whatever its token (for a
	// write known not to have run). ErrNotFound if absent; ErrLeaseLost if the
	// record is not in flight.
	ForceRelease(ctx context.Context, key Key) error
	// ForceComplete completes an in-flight record with resp whatever its
	// token (for a write known to have run). Errors as for ForceRelease.
	ForceComplete(ctx context.Context, key Key, resp *Response) error
}
