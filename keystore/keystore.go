package keystore

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
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
	// record was taken over, released, completed or has expired). From
	// [Store.CompleteClaim] it means only that: another claim holds the
	// key (a real fence rejection, the one a late-completion counter counts).
	// From Reserve it means the claim's id was released by
	// [Store.ReleaseClaim] before the claim arrived: nothing was claimed.
	ErrLeaseLost = errors.New("keystore: lease lost")
	// ErrFull: the store is at capacity and refuses new records. The proxy
	// fails closed (503).
	ErrFull = errors.New("keystore: store full")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("keystore: store closed")
	// ErrOutcomeUnknown: the key's record is unknown (DESIGN.md, Unknown
	// outcomes): its request may or may not have run upstream, and nothing
	// runs until it is resolved. The proxy answers 409
	// idempotency_outcome_unknown. See [UnknownError].
	ErrOutcomeUnknown = errors.New("keystore: outcome unknown")
)

// CheckOpen is what a backend's operation answers before it starts: the
// context's error when it is done, else ErrClosed when the store is closed,
// else nil.
func CheckOpen(ctx context.Context, closed bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if closed {
		return ErrClosed
	}
	return nil
}

// UnknownError is the [ErrOutcomeUnknown] a Reserve returns. Marked is
// true when this very Reserve found a lapsed claim with the sent mark
// (opts.Hold) and marked it unknown with cause [CauseLapsed]; Info is then
// what the claim's holder wrote with its sent mark (see [UnknownInfo]).
type UnknownError struct {
	Marked bool
	Info   *Response
}

func (e *UnknownError) Error() string {
	if e.Marked {
		return ErrOutcomeUnknown.Error() + " (a lapsed claim that reached the upstream was marked unknown)"
	}
	return ErrOutcomeUnknown.Error()
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *UnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Cause says why a record's outcome became unknown (DESIGN.md, Unknown
// outcomes): the label of idemgate_unknown_outcomes_total.
type Cause uint8

// Causes of unknown outcomes.
const (
	CauseBroken      Cause = iota + 1 // the connection broke after the request was sent
	CauseLateTimeout                  // the late wait ended without an answer
	CauseLapsed                       // the holder's lease ended (it died) after the request was sent
	CauseShutdown                     // the process stopped while the call was kept
)

// Causes lists every cause, for metrics.
var Causes = []Cause{CauseBroken, CauseLateTimeout, CauseLapsed, CauseShutdown}

func (c Cause) String() string {
	switch c {
	case CauseBroken:
		return "broken"
	case CauseLateTimeout:
		return "late_timeout"
	case CauseLapsed:
		return "lapsed"
	case CauseShutdown:
		return "shutdown"
	}
	return "unknown"
}

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

// FingerprintVersion names the function that computed a [Fingerprint]
// (DESIGN.md, Fingerprint → Upgrades). Every record carries the version it
// was written with, so that a request can be compared with a record in the
// record's version for as long as records of an older version live.
type FingerprintVersion uint8

// FingerprintV1 is the first release's fingerprint (it hashed the route
// name). Records written before versions existed report it, and a zero
// [ReserveOptions.FingerprintVersion] means it.
const FingerprintV1 FingerprintVersion = 1

// Normalize returns the version a store records for v: v itself, or
// [FingerprintV1] when v is zero.
func (v FingerprintVersion) Normalize() FingerprintVersion {
	if v == 0 {
		return FingerprintV1
	}
	return v
}

// MismatchError is the [ErrFingerprintMismatch] a Reserve returns: the key
// is in use by a request with another fingerprint, or with a fingerprint of
// another version. When Version differs from the version the caller sent,
// the caller may compute the request's fingerprint in Version and Reserve
// again: only a mismatch in the record's own version is a reused key.
type MismatchError struct {
	// Version is the record's fingerprint version.
	Version FingerprintVersion
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("%v (record's fingerprint version %d)", ErrFingerprintMismatch, e.Version)
}

// Is makes errors.Is(err, ErrFingerprintMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrFingerprintMismatch }

// ClaimID identifies one claim: 128 random bits that the caller draws with
// [NewClaimID] before it sends the claim (DESIGN.md §8). A completion tells
// its own record from another claim's by it, and a claim whose reply was
// lost can still be released by it ([Store.ReleaseClaim]).
type ClaimID [16]byte

// NewClaimID draws a random claim id. It never returns the zero id.
func NewClaimID() ClaimID {
	var id ClaimID
	for id.IsZero() {
		rand.Read(id[:]) // never fails (crypto/rand)
	}
	return id
}

// IsZero reports whether id is the zero id, which no claim carries.
func (id ClaimID) IsZero() bool { return id == ClaimID{} }

// String returns the id in lower-case hex.
func (id ClaimID) String() string { return hex.EncodeToString(id[:]) }

// State is the state of a record.
type State uint8

// Record states.
const (
	StateInFlight  State = iota + 1 // claimed; the request is running
	StateCompleted                  // the answer is stored
	StateReleased                   // released; a tombstone that keeps the token sequence
	// StateUnknown: the claim's request was sent, and its outcome is
	// unknown; nothing runs until it is resolved ([UnknownStore]).
	StateUnknown
)

func (s State) String() string {
	switch s {
	case StateInFlight:
		return "in_flight"
	case StateCompleted:
		return "completed"
	case StateReleased:
		return "released"
	case StateUnknown:
		return "outcome_unknown"
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
	// Compressed marks a Body that is a zstd frame of the upstream's body
	// (keystore/compressed). It is set only between that wrapper and the
	// stores under it, which keep it with the record: callers above the
	// wrapper always get the body itself, with Compressed false.
	Compressed bool
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
	// ClaimID identifies this claim; draw it with [NewClaimID] before the
	// claim is sent, so that it can be released if the reply is lost. Zero:
	// the store draws one (Reservation.Claim.ID tells which).
	ClaimID ClaimID
	// FingerprintVersion is the version Fingerprint was computed in. Zero
	// means [FingerprintV1].
	FingerprintVersion FingerprintVersion
	// Hold is unknown_outcome: hold (DESIGN.md, Unknown outcomes): an
	// in-flight record whose lease ended and that carries the sent mark is
	// marked unknown (cause [CauseLapsed]) instead of taken over, and
	// Reserve returns an [UnknownError] with Marked set. Without Hold it is
	// taken over as before. An unknown record answers [ErrOutcomeUnknown]
	// either way.
	Hold bool
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
	// Claim describes a new claim (Token > 0): pass it to
	// [Store.CompleteClaim]. Zero for a replay.
	Claim Claim
	// FingerprintVersion is the record's fingerprint version (a new claim's
	// is the request's).
	FingerprintVersion FingerprintVersion
	// TTL is set with Response (a replay): how long the completed record
	// still lives, counted from when the store read it; zero when the
	// backend cannot tell. A completed record never changes until it
	// expires, so a cache that counts TTL from before it sent the Reserve
	// never keeps the answer longer than the store does (keystore/replaycache).
	TTL time.Duration
}

// Claim is what a store needs to complete a claim, even when its record
// vanished: who claimed (ID, Token), for what request (Fingerprint, its
// version, Route) and until when the record lives (Claimed, Expires, by the
// store's clock). A new claim's Reservation carries it.
type Claim struct {
	ID                 ClaimID
	Token              uint64
	Fingerprint        Fingerprint
	FingerprintVersion FingerprintVersion
	Route              string
	Claimed            time.Time // when the claim was made
	Expires            time.Time // when its record expires: Claimed + retention
}

// Completion says how [Store.CompleteClaim] stored an answer.
type Completion uint8

// Completions.
const (
	// Completed: the record carried the claim and now holds the answer (or
	// already held it: an earlier attempt whose reply was lost stored it).
	Completed Completion = iota + 1
	// Recreated: the record had vanished (the store lost it); it was created
	// again, completed, to live until the claim's Expires.
	Recreated
	// Expired: the record vanished and the claim's Expires has passed, so
	// there was nothing to keep the answer for; nothing was stored.
	Expired
)

func (c Completion) String() string {
	switch c {
	case Completed:
		return "completed"
	case Recreated:
		return "recreated"
	case Expired:
		return "expired"
	}
	return "unknown"
}

// Record is a snapshot of a stored record, for operators.
type Record struct {
	Key                Key
	State              State
	Fingerprint        Fingerprint
	FingerprintVersion FingerprintVersion // FingerprintV1 for records written before versions
	Route              string
	Token              uint64
	ClaimID            ClaimID   // zero for records of the first release and after an admin repair
	Claimed            time.Time // when the current claim was made
	LeaseEnd           time.Time // in flight only
	Expires            time.Time // when the record is dropped
	Response           *Response // completed only
	// Sent is the sent mark of an in-flight record ([UnknownStore.MarkSent]).
	Sent bool
	// Cause is an unknown record's cause; 0 for other states.
	Cause Cause
	// Info is what the holder wrote with its sent mark, in flight (with
	// Sent) or unknown: see [UnknownInfo].
	Info *Response
}

// UnknownInfo is what a sent mark keeps of the original request for
// operators (the admin API lists unknown records with it). It travels as a
// [Response] without status, so that a sealing store seals it like a
// body; its header names are these.
const (
	InfoMethod    = "Method"
	InfoPath      = "Path"
	InfoKey       = "Key"
	InfoRequestID = "Request-Id"
)

// UnknownInfo returns the sent mark's info of a request: its method, raw
// path, idempotency key and request id.
func UnknownInfo(method, path, key, requestID string) *Response {
	return &Response{Header: http.Header{
		InfoMethod: {method}, InfoPath: {path}, InfoKey: {key}, InfoRequestID: {requestID},
	}}
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

	// CompleteClaim stores resp as the answer of claim c (from the claim's
	// Reservation):
	//   - the record carries c.ID and c.Token, in flight: it is completed
	//     (Completed); already completed by c: nothing changes (Completed).
	//   - there is no record at all (vanished: the store lost it): it is
	//     created completed with resp, living until c.Expires (Recreated), or,
	//     if c.Expires has passed, nothing is stored (Expired). An answer that
	//     exists is never thrown away.
	//   - otherwise (another claim holds the key, it was released, or an
	//     operator repaired it): [ErrLeaseLost], and nothing changes.
	// It never returns ErrNotFound.
	CompleteClaim(ctx context.Context, key Key, c Claim, resp *Response) (Completion, error)

	// ReleaseClaim releases the claim with id whose reply was lost (the
	// caller does not know whether it was made): if the record is in flight
	// under id, it is released (nothing ran), and in every case a tombstone
	// for id lives for lease, so that the claim, if it reaches the store
	// later, claims nothing (its Reserve returns ErrLeaseLost). A record of
	// another claim is left as it is. Safe to repeat.
	ReleaseClaim(ctx context.Context, key Key, id ClaimID, lease time.Duration) error

	// Close releases the store's resources and stops its goroutines. It is
	// safe to call more than once; later calls return nil. Other methods
	// return ErrClosed after Close.
	Close() error
}

// UnknownStore is what DESIGN.md's Unknown outcomes need beyond
// [Store]. Every backend in this module implements it. An unknown
// record is written so that older releases read it as in flight with a
// lease that ends at its expiry (they answer 409 in progress and never take
// it over). [Store.CompleteClaim] and [Store.Release] by the unknown
// record's own claim (its holder's late answer) resolve it like
// [UnknownStore.Resolve].
type UnknownStore interface {
	Store

	// MarkSent writes the sent mark on the in-flight claim token of key,
	// just before its request is forwarded, with info (see [UnknownInfo]).
	// ErrLeaseLost or ErrNotFound as for Complete.
	MarkSent(ctx context.Context, key Key, token uint64, info *Response) error

	// MarkUnknown marks the in-flight claim token of key unknown with
	// cause, lease ended or not. ErrLeaseLost or ErrNotFound as for
	// Complete.
	MarkUnknown(ctx context.Context, key Key, token uint64, cause Cause) error

	// Resolve resolves the unknown record of key that carries claim id:
	// with resp, it is completed with resp; with nil, it is released (the
	// next Reserve claims anew). The first resolution wins: a record that
	// is not unknown under id gives ErrLeaseLost and is left as it is;
	// none, ErrNotFound.
	Resolve(ctx context.Context, key Key, id ClaimID, resp *Response) error

	// Unknown lists up to limit (0: all) unknown records, oldest claim
	// first, with their Info.
	Unknown(ctx context.Context, limit int) ([]Record, error)

	// AcquireProbe takes the probe lease of key (see [ProbeState]) for
	// ttl, unless another owner's lease runs: then ok is false. The lease
	// comes with the state the last probe left (the zero state when there
	// is none). The lease lives beside the record, whatever its state.
	AcquireProbe(ctx context.Context, key Key, ttl time.Duration) (l ProbeLease, ok bool, err error)

	// EndProbe records st as key's probe state, kept for keep, if owner
	// still holds the probe lease (else ErrLeaseLost, and nothing
	// changes), and keeps the lease for hold from now, so that no replica
	// probes the record again before (hold 0 gives it up).
	EndProbe(ctx context.Context, key Key, owner string, st ProbeState, hold, keep time.Duration) error

	// ProbeStatus returns key's probe state; ok is false when it has none.
	ProbeStatus(ctx context.Context, key Key) (st ProbeState, ok bool, err error)
}

// Admin is what the admin API needs beyond [Store]: operator repairs that
// ignore fencing tokens. Backends implement it alongside Store.
type Admin interface {
	// InFlight lists up to limit in-flight records claimed at least olderThan
	// ago, oldest first. A record it cannot read (a foreign or damaged value
	// at a record's key, a sealed part that does not open) is skipped, not
	// fatal: InFlight then returns the records it could read together with
	// a [*DamagedError] counting the skipped ones. Any other error comes
	// with no records.
	InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]Record, error)
	// ForceRelease releases an in-flight record whatever its token (for a
	// write known not to have run). ErrNotFound if absent; ErrLeaseLost if the
	// record is not in flight.
	ForceRelease(ctx context.Context, key Key) error
	// ForceComplete completes an in-flight record with resp whatever its
	// token (for a write known to have run). Errors as for ForceRelease.
	ForceComplete(ctx context.Context, key Key, resp *Response) error
}

// DamagedError is the error of a listing ([Admin.InFlight]) that skipped
// records it could not read; the listing's records come with it. Build one
// with Add and return [DamagedError.OrNil].
type DamagedError struct {
	// Count is how many records were skipped.
	Count int
	// Names are the first [MaxDamagedNames] skipped records' names as the
	// backend stores them (a Redis key; a store key's hex), for the log:
	// they hold hashes, never client input.
	Names []string
	// Err is the first skipped record's cause.
	Err error
}

// MapListing passes a listing's records (recs and err, from the store a
// decorator wraps) through fn: a record fn fails on is skipped and counted
// as damaged, with those the wrapped store skipped, as the backends skip
// what they cannot read. Any other error of the listing is returned as it
// is.
func MapListing(recs []Record, err error, fn func(Record) (Record, error)) ([]Record, error) {
	damaged := &DamagedError{}
	if err != nil && !errors.As(err, &damaged) {
		return nil, err
	}
	out := recs[:0]
	for _, rec := range recs {
		r, ferr := fn(rec)
		if ferr != nil {
			damaged.Add(rec.Key.String(), ferr)
			continue
		}
		out = append(out, r)
	}
	return out, damaged.OrNil()
}

// MaxDamagedNames bounds [DamagedError.Names].
const MaxDamagedNames = 10

// Add counts one skipped record, name, that failed with err.
func (e *DamagedError) Add(name string, err error) {
	e.Count++
	if len(e.Names) < MaxDamagedNames {
		e.Names = append(e.Names, name)
	}
	if e.Err == nil {
		e.Err = err
	}
}

// Merge adds o's records to e; o may be nil.
func (e *DamagedError) Merge(o *DamagedError) {
	if o == nil || o.Count == 0 {
		return
	}
	e.Count += o.Count
	e.Names = append(e.Names, o.Names[:max(0, min(len(o.Names), MaxDamagedNames-len(e.Names)))]...)
	if e.Err == nil {
		e.Err = o.Err
	}
}

// OrNil returns e as an error, or nil when it counts no record (or is nil).
func (e *DamagedError) OrNil() error {
	if e == nil || e.Count == 0 {
		return nil
	}
	return e
}

func (e *DamagedError) Error() string {
	first := ""
	if len(e.Names) > 0 {
		first = " " + e.Names[0]
	}
	return fmt.Sprintf("keystore: %d damaged record(s) skipped (first%s: %v)", e.Count, first, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// EpochStatus reports store resets (DESIGN.md, Store loss): how often the
// store was found emptied (its epoch marker vanished) since the process
// started, and when it last was. /healthz shows it; Resets backs
// idemgate_store_resets_total.
type EpochStatus struct {
	// Resets counts the resets seen.
	Resets uint64
	// LastReset is when the last reset was seen; zero if none was.
	LastReset time.Time
	// Checked is when the marker was last checked successfully; zero if it
	// never was (or the store cannot lose data).
	Checked time.Time
	// Err is the last check's error, nil when it succeeded.
	Err error
}

// EpochReporter is implemented by whatever watches a store's epoch marker
// (the Redis store's epoch watcher; the memory store, which never resets).
// EpochStatus is safe to call from any goroutine.
type EpochReporter interface {
	EpochStatus() EpochStatus
}
