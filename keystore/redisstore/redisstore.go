package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/idemgate/idemgate/internal/rediskey"
	"github.com/idemgate/idemgate/keystore"
)

// ErrCorrupt is returned (wrapped, with the reason) when the value at a
// record's key is not a record this package wrote: another type, another
// format, or a malformed field. It is never treated as an absent record; the
// proxy fails closed on it like on any other store error.
var ErrCorrupt = errors.New("redisstore: corrupt or foreign value at record key")

// DefaultKeyPrefix is the key prefix used when [Options.KeyPrefix] is empty.
const DefaultKeyPrefix = rediskey.DefaultPrefix

// Options configure a [Store]. The zero value is usable.
type Options struct {
	// KeyPrefix starts every key the store writes. Default
	// [DefaultKeyPrefix]. It must not contain '{' or '}': the record's hash
	// tag follows it.
	KeyPrefix string
	// DirectCalls sends every script call on its own round trip. By
	// default, calls that concurrent requests make while another call is
	// on the wire are sent together as the next pipeline, one write and
	// one read for all of them (see [pipeliner]).
	DirectCalls bool
	// RecordFormat is the layout records are written in; records in
	// either are read. Default [FormatCompact].
	RecordFormat RecordFormat
	// Timeout, when not nil, is how long a call queued behind a pipeline
	// waits for its reply: give the client's [ClientOptions.LiveTimeout].
	// Default: the client's read timeout.
	Timeout *Timeout
	// EvalScripts runs every call with EVALSHA, never as a function
	// (FCALL). By default calls run as functions, and the store turns to
	// EVALSHA by itself where Redis refuses them (see [Store.Functions]).
	EvalScripts bool
}

// Store is the Redis key store. It is safe for concurrent use by many
// goroutines and by many processes sharing one Redis. Create it with [New].
type Store struct {
	client redis.UniversalClient
	// pipe sends the script calls; nil with Options.DirectCalls, when
	// send does.
	pipe   *pipeliner
	send   *sender
	prefix string
	// format holds the scripts of the record format the store writes
	// (SetRecordFormat swaps them).
	format atomic.Pointer[scripts]
	closed atomic.Bool

	// movedMin is the smallest answer body CompleteClaim moves
	// (movedMinBody; this package's tests set 0 to move every answer).
	movedMin int
	// moveRefused is set once Redis refused a moved answer to the ACL
	// user (NOPERM): every answer then goes the classic way.
	moveRefused atomic.Bool

	// noFunctions is set when the calls run with EVALSHA instead of FCALL
	// (Options.EvalScripts, or Redis refused the functions: see
	// functionRefused). It is never cleared.
	noFunctions atomic.Bool
	// loads makes one FUNCTION LOAD for every call refused with "Function
	// not found" meanwhile: a node that lost its library answers so to
	// every call in flight at once.
	loads singleflight.Group

	// offset is added to Redis's TIME in every script, in milliseconds. Only
	// this package's tests set it, to move the store's clock without
	// sleeping.
	offset atomic.Int64
}

var (
	_ keystore.UnknownStore = (*Store)(nil)
	_ keystore.Admin        = (*Store)(nil)
)

// New returns a Store that keeps its records in client. The caller owns
// client: [Store.Close] does not close it, so one client may serve several
// stores (and the rate limiter); close it after every user is closed. Build
// it with [NewClient], whose timeouts and retries suit a fail-closed proxy.
//
// New does not contact Redis: a store made while Redis is down works as soon
// as Redis is back.
func New(client redis.UniversalClient, opts Options) (*Store, error) {
	if err := rediskey.Check("redisstore", client, &opts.KeyPrefix); err != nil {
		return nil, err
	}
	s := &Store{client: client, prefix: opts.KeyPrefix, send: newSender(client), movedMin: movedMinBody}
	s.noFunctions.Store(opts.EvalScripts)
	if err := s.SetRecordFormat(opts.RecordFormat); err != nil {
		return nil, err
	}
	if !opts.DirectCalls {
		t := opts.Timeout
		if t == nil {
			t = NewTimeout(readTimeout(client))
		}
		s.pipe = newPipeliner(s.send, t)
	}
	return s, nil
}

// SetRecordFormat makes the store write its records in f from its next
// call on (a config reload). Calls already running finish in the format
// they began with; every record is read in either.
func (s *Store) SetRecordFormat(f RecordFormat) error {
	if f != FormatCompact && f != FormatHash {
		return fmt.Errorf("redisstore: unknown record format %d", f)
	}
	s.format.Store(formatScripts[f])
	return nil
}

// lua returns the scripts of the record format the store writes.
func (s *Store) lua() *scripts { return s.format.Load() }

// readTimeout is client's read timeout ([ClientOptions.Timeout] for a
// client from [NewClient]), or [DefaultTimeout] when it has none.
func readTimeout(client redis.UniversalClient) time.Duration {
	return rediskey.ReadTimeout(client, DefaultTimeout)
}

// key returns the Redis key of k: the prefix, then the hex key as the hash
// tag, so that a record and anything a script touches with it share a slot,
// while records spread over all slots.
func (s *Store) key(k keystore.Key) string {
	return s.prefix + "{" + k.String() + "}"
}

func (s *Store) check(ctx context.Context) error { return keystore.CheckOpen(ctx, s.closed.Load()) }

// run runs script on c's record and returns its code and the rest of its
// reply; c is freed (see [Store.do]). A failure to reach Redis is returned wrapped;
// codeCorrupt becomes ErrCorrupt.
func (s *Store) run(ctx context.Context, name string, script lua, c *call) (int64, []any, error) {
	v, err := s.do(ctx, script, c)
	if err != nil {
		return 0, nil, wrapErr(name, err)
	}
	return scriptReply(name, v)
}

// scriptReply splits a script's reply v into its code and the rest;
// codeCorrupt becomes ErrCorrupt, with the script's reason.
func scriptReply(name string, v any) (int64, []any, error) {
	reply, ok := v.([]any)
	if !ok || len(reply) == 0 {
		return 0, nil, fmt.Errorf("redisstore: %s: unexpected reply %T", name, v)
	}
	code, ok := reply[0].(int64)
	if !ok {
		return 0, nil, fmt.Errorf("redisstore: %s: unexpected reply code %T", name, reply[0])
	}
	if code == codeCorrupt {
		return 0, nil, fmt.Errorf("%w: %s: %s", ErrCorrupt, name, str(reply, 1))
	}
	return code, reply[1:], nil
}

// wrapErr wraps an error from go-redis. Redis refusing writes at its
// maxmemory limit (OOM) is [keystore.ErrFull]; anything else stays as it is
// (connection errors, timeouts, context errors).
func wrapErr(name string, err error) error {
	if strings.HasPrefix(err.Error(), "OOM ") {
		return fmt.Errorf("redisstore: %s: %w: %w", name, keystore.ErrFull, err)
	}
	return fmt.Errorf("redisstore: %s: %w", name, err)
}

// codeErr maps the codes every mutating script shares.
func codeErr(name string, code int64) error {
	switch code {
	case codeNotFound:
		return keystore.ErrNotFound
	case codeLost:
		return keystore.ErrLeaseLost
	case codeInFlight:
		return keystore.ErrInFlight
	case codeMismatch:
		return keystore.ErrFingerprintMismatch
	}
	return fmt.Errorf("redisstore: %s: unexpected reply code %d", name, code)
}

// Reserve implements [keystore.Store] in one round trip. A takeover also
// extends the record's retention to opts.Retention from the takeover, so that
// the answer of the run that took over is kept as long as a first run's.
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	if err := s.check(ctx); err != nil {
		return keystore.Reservation{}, err
	}
	if opts.Lease <= 0 || opts.Retention < opts.Lease {
		return keystore.Reservation{}, fmt.Errorf("redisstore: reserve: lease %v and retention %v: want 0 < lease <= retention", opts.Lease, opts.Retention)
	}
	if opts.ClaimID.IsZero() {
		opts.ClaimID = keystore.NewClaimID()
	}
	fv := opts.FingerprintVersion.Normalize()
	c := s.newCall(k)
	c.bytes(opts.Fingerprint[:])
	c.str(opts.Route)
	c.int(ms(opts.Lease))
	c.int(ms(opts.Retention))
	c.op()
	c.bytes(opts.ClaimID[:])
	c.int(int64(fv))
	if opts.Hold {
		c.str("1")
	} else {
		c.str("0")
	}
	code, rest, err := s.run(ctx, "reserve", s.lua().reserve, c)
	if err != nil {
		return keystore.Reservation{}, err
	}
	switch code {
	case codeClaim:
		tok, le, to, cl, ex := integer(rest, 0), integer(rest, 1), integer(rest, 2), integer(rest, 3), integer(rest, 4)
		if tok <= 0 || le <= 0 || cl <= 0 || ex <= 0 {
			return keystore.Reservation{}, fmt.Errorf("redisstore: reserve: malformed claim reply")
		}
		return keystore.Reservation{
			Token:    uint64(tok),
			LeaseEnd: time.UnixMilli(le),
			Takeover: to == 1,
			Claim: keystore.Claim{
				ID:                 opts.ClaimID,
				Token:              uint64(tok),
				Fingerprint:        opts.Fingerprint,
				FingerprintVersion: fv,
				Route:              opts.Route,
				Claimed:            time.UnixMilli(cl),
				Expires:            time.UnixMilli(ex),
			},
			FingerprintVersion: fv,
		}, nil
	case codeReplay:
		resp, err := keystore.DecodeResponse(stringBytes(str(rest, 0)))
		if err != nil {
			return keystore.Reservation{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		return keystore.Reservation{Response: resp, FingerprintVersion: version(rest, 1), TTL: time.Duration(max(0, integer(rest, 2))) * time.Millisecond}, nil
	case codeMismatch:
		return keystore.Reservation{}, &keystore.MismatchError{Version: version(rest, 0)}
	case codeRevoked:
		return keystore.Reservation{}, fmt.Errorf("redisstore: reserve: claim %s was released before it arrived: %w", opts.ClaimID, keystore.ErrLeaseLost)
	case codeUnknown:
		ue := &keystore.UnknownError{Marked: integer(rest, 0) == 1}
		if ue.Marked {
			ue.Info, _ = decodeInfo(str(rest, 1)) // a damaged info is only lost for the log
		}
		return keystore.Reservation{}, ue
	}
	return keystore.Reservation{}, codeErr("reserve", code)
}

// version reads a fingerprint version from a reply; 0 (invalid) if absent.
func version(v []any, i int) keystore.FingerprintVersion {
	n := integer(v, i)
	if n <= 0 || n > 255 {
		return 0
	}
	return keystore.FingerprintVersion(n)
}

// CompleteClaim implements [keystore.Store] in one round trip, which
// also publishes ctx's [keystore.FoldedNotice], if any.
//
// In the compact format the answer does not go through Lua: this Redis's
// Lua hashes every byte of every string it makes, which made a 4.5 KB
// answer cost the script ~40 µs of Redis CPU (issue 31). The call SETs the
// answer, after a placeholder as long as the record's header, at a scratch
// key in the record's slot (scratchKey), and in the same pipeline runs
// complete_claim_moved.lua, which checks what complete_claim.lua checks,
// writes the header over the placeholder and renames the scratch key to
// the record's: the record is byte for byte the one complete_claim.lua
// writes. When it cannot (live tombstones, a route of another length, the
// scratch key gone), it deletes the scratch key, changes nothing and says
// so, and the answer goes in complete_claim.lua's arguments after all: a
// second round trip, rare. So it does when Redis Cluster refuses the
// script with TRYAGAIN while the record's slot migrates (the new scratch
// key went to the slot's new node); that scratch key expires. The hash
// format, and an answer whose body is under movedMinBody, take
// complete_claim.lua at once.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	if c.ID.IsZero() || c.Token == 0 {
		return 0, errors.New("redisstore: complete claim: claim without an id or token")
	}
	how, _, err := s.completeClaim(ctx, k, c, resp, newOp(), s.lua(), true)
	return how, err
}

// completeClaim is CompleteClaim with its op nonce and scripts given, and
// whether to try the scratch key (move). moved tells whether the answer
// went by the scratch key.
func (s *Store) completeClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response, op [8]byte, l *scripts, move bool) (_ keystore.Completion, moved bool, _ error) {
	script := l.completeClaim
	if move && l.format == FormatCompact && len(resp.Body) >= s.movedMin && !s.moveRefused.Load() {
		script = l.completeClaimMoved
	} else {
		move = false
	}
	a, n := s.completeClaimCall(ctx, k, c, resp, op, move)
	code, rest, err := s.run(ctx, "complete claim", script, a)
	if move && redis.HasErrorPrefix(err, "NOPERM") {
		// An ACL user whose key patterns cover the records but not the
		// scratch keys (prefix + "answer:..."): NOPERM for the SET and the
		// script. The answer goes the classic way, now and from now on:
		// refusing it would leave the key to be taken over and the write
		// to run again.
		s.moveRefused.Store(true)
		return s.completeClaim(ctx, k, c, resp, op, l, false)
	}
	if move && ((err == nil && code == codeNeedAnswer) || redis.IsTryAgainError(err)) {
		// TRYAGAIN: the record's Cluster slot is migrating, the record
		// is still here, and the SET of the scratch key, new, went to the
		// slot's new node (ASK): two keys on two nodes. The classic call
		// has one key.
		return s.completeClaim(ctx, k, c, resp, op, l, false)
	}
	if err != nil {
		return 0, move, err
	}
	if code != codeOK {
		return 0, move, codeErr("complete claim", code)
	}
	switch how := keystore.Completion(integer(rest, 0)); how {
	case keystore.Completed, keystore.Recreated, keystore.Expired:
		if n != nil {
			n.Published = true
		}
		return how, move, nil
	}
	return 0, move, fmt.Errorf("redisstore: complete claim: unexpected reply %v", rest)
}

// movedMinBody is the smallest answer body CompleteClaim moves by its
// scratch key. Moving costs Redis a command more (its parsing and reply,
// the scratch key's insertion and rename) and saves hashing and copying
// the answer in Lua: measured on Redis 7.0 (BENCHMARKS.md, "Redis's Lua and
// big strings"), ~5 µs of Redis CPU saved with a 4.5 KB answer, ~140 µs
// with 45 KB; the break-even lies near 3 KB.
const movedMinBody = 4 << 10

// completeClaimCall is the call of complete_claim.lua, or with move of
// complete_claim_moved.lua, and the notice it publishes (call.notice).
func (s *Store) completeClaimCall(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response, op [8]byte, move bool) (*call, *keystore.FoldedNotice) {
	a := s.newCall(k)
	a.bytes(c.ID[:])
	a.uint(c.Token)
	if move {
		a.moved(s.prefix, op, headLen(len(c.Route), len(op), len(c.ID)), resp)
	} else {
		a.answer(resp)
	}
	a.opNonce(op)
	a.bytes(c.Fingerprint[:])
	a.int(int64(c.FingerprintVersion.Normalize()))
	a.str(c.Route)
	a.int(c.Claimed.UnixMilli())
	a.int(c.Expires.UnixMilli())
	return a, a.notice(ctx, k)
}

// appendScratchKey appends the key where CompleteClaim's answer waits for
// complete_claim_moved.lua to move it to record (the record's key, prefix
// and all):
//
//	P + "answer:{" + hex + "}:" + hex op nonce
//
// It shares the record's hash tag (its Cluster slot), never matches a
// record's pattern (P + "{*", as the listings SCAN), and is unique to the
// call, so that a late call never takes another's answer.
func appendScratchKey(b []byte, prefix, record string, op [8]byte) []byte {
	b = append(b, prefix...)
	b = append(b, "answer:"...)
	b = append(b, record[len(prefix):]...)
	b = append(b, ':')
	return hex.AppendEncode(b, op[:])
}

// ReleaseClaim implements [keystore.Store] in one round trip.
func (s *Store) ReleaseClaim(ctx context.Context, k keystore.Key, id keystore.ClaimID, lease time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if id.IsZero() || lease <= 0 {
		return fmt.Errorf("redisstore: release claim: id %s, lease %v: want an id and a lease > 0", id, lease)
	}
	c := s.newCall(k)
	c.bytes(id[:])
	c.int(ms(lease))
	code, _, err := s.run(ctx, "release claim", s.lua().releaseClaim, c)
	if err != nil {
		return err
	}
	if code != codeOK {
		return codeErr("release claim", code)
	}
	return nil
}

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.complete(ctx, "complete", k, strconv.FormatUint(token, 10), resp, "0")
}

func (s *Store) complete(ctx context.Context, name string, k keystore.Key, token string, resp *keystore.Response, force string) error {
	c := s.newCall(k)
	c.str(token)
	c.answer(resp)
	c.op()
	c.str(force)
	code, _, err := s.run(ctx, name, s.lua().complete, c)
	if err != nil {
		return err
	}
	if code != codeOK {
		return codeErr(name, code)
	}
	return nil
}

// Release implements [keystore.Store] in one round trip, which also
// publishes ctx's [keystore.FoldedNotice], if any. The record stays as a released
// tombstone until it expires, keeping its token so that the next claim's
// token is higher.
func (s *Store) Release(ctx context.Context, k keystore.Key, token uint64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.release(ctx, "release", k, strconv.FormatUint(token, 10), "0")
}

func (s *Store) release(ctx context.Context, name string, k keystore.Key, token, force string) error {
	c := s.newCall(k)
	c.str(token)
	c.op()
	c.str(force)
	var n *keystore.FoldedNotice
	if force == "0" {
		n = c.notice(ctx, k)
	}
	code, _, err := s.run(ctx, name, s.lua().release, c)
	if err != nil {
		return err
	}
	if code != codeOK {
		return codeErr(name, code)
	}
	if n != nil {
		n.Published = true
	}
	return nil
}

// Renew implements [keystore.Store].
func (s *Store) Renew(ctx context.Context, k keystore.Key, token uint64, lease time.Duration) (time.Time, error) {
	if err := s.check(ctx); err != nil {
		return time.Time{}, err
	}
	if lease <= 0 {
		return time.Time{}, fmt.Errorf("redisstore: renew: lease %v: want > 0", lease)
	}
	c := s.newCall(k)
	c.uint(token)
	c.int(ms(lease))
	code, rest, err := s.run(ctx, "renew", s.lua().renew, c)
	if err != nil {
		return time.Time{}, err
	}
	if code != codeOK {
		return time.Time{}, codeErr("renew", code)
	}
	return time.UnixMilli(integer(rest, 0)), nil
}

// Get implements [keystore.Store].
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return keystore.Record{}, err
	}
	code, rest, err := s.run(ctx, "get", s.lua().get, s.newCall(k))
	if err != nil {
		return keystore.Record{}, err
	}
	if code != codeOK {
		return keystore.Record{}, codeErr("get", code)
	}
	return parseRecord(k, rest)
}

// parseRecord parses the rest of getScript's {8, ...} reply.
func parseRecord(k keystore.Key, rest []any) (keystore.Record, error) {
	rec := keystore.Record{
		Key:                k,
		State:              keystore.State(integer(rest, 0)),
		Route:              str(rest, 2),
		Token:              uint64(integer(rest, 3)),
		Claimed:            time.UnixMilli(integer(rest, 4)),
		Expires:            time.UnixMilli(integer(rest, 6)),
		FingerprintVersion: version(rest, 9),
	}
	copy(rec.Fingerprint[:], str(rest, 1))
	if ci := str(rest, 8); len(ci) == len(rec.ClaimID) {
		copy(rec.ClaimID[:], ci)
	}
	switch mk := integer(rest, 10); {
	case mk == 1:
		rec.Sent = true
	case mk > 10:
		rec.State, rec.Cause = keystore.StateUnknown, keystore.Cause(mk-10)
	}
	if rec.State == keystore.StateInFlight {
		rec.LeaseEnd = time.UnixMilli(integer(rest, 5))
	}
	if rec.Sent || rec.State == keystore.StateUnknown {
		info, err := decodeInfo(str(rest, 11))
		if err != nil {
			return keystore.Record{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		rec.Info = info
	}
	if rec.State == keystore.StateCompleted && str(rest, 7) != "" {
		resp, err := keystore.DecodeResponse(stringBytes(str(rest, 7)))
		if err != nil {
			return keystore.Record{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		rec.Response = resp
	}
	return rec, nil
}

// decodeInfo decodes a sent mark's info; nil for none.
func decodeInfo(s string) (*keystore.Response, error) {
	if s == "" {
		return nil, nil
	}
	return keystore.DecodeResponse(stringBytes(s))
}

// MarkSent implements [keystore.UnknownStore] in one round trip.
func (s *Store) MarkSent(ctx context.Context, k keystore.Key, token uint64, info *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if info == nil {
		info = &keystore.Response{}
	}
	c := s.newCall(k)
	c.uint(token)
	c.answer(info)
	return s.settle(ctx, "mark sent", s.lua().markSent, c)
}

// MarkUnknown implements [keystore.UnknownStore] in one round trip.
func (s *Store) MarkUnknown(ctx context.Context, k keystore.Key, token uint64, cause keystore.Cause) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	c := s.newCall(k)
	c.uint(token)
	c.int(int64(cause))
	return s.settle(ctx, "mark unknown", s.lua().markUnknown, c)
}

// Resolve implements [keystore.UnknownStore] in one round trip.
func (s *Store) Resolve(ctx context.Context, k keystore.Key, id keystore.ClaimID, resp *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	c := s.newCall(k)
	c.bytes(id[:])
	if resp != nil {
		c.answer(resp)
	} else {
		c.str("")
	}
	c.op()
	return s.settle(ctx, "resolve", s.lua().resolve, c)
}

// settle runs a script whose only success is {8}.
func (s *Store) settle(ctx context.Context, name string, script lua, c *call) error {
	code, _, err := s.run(ctx, name, script, c)
	if err != nil {
		return err
	}
	if code != codeOK {
		return codeErr(name, code)
	}
	return nil
}

// Unknown implements [keystore.UnknownStore]: a SCAN of every master, as
// [Store.InFlight].
func (s *Store) Unknown(ctx context.Context, limit int) ([]keystore.Record, error) {
	return s.list(ctx, "unknown", "2", limit, func(rec keystore.Record, _ int64) bool {
		return rec.State == keystore.StateUnknown
	})
}

// ForceRelease implements [keystore.Admin].
func (s *Store) ForceRelease(ctx context.Context, k keystore.Key) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.release(ctx, "force release", k, "", "1")
}

// ForceComplete implements [keystore.Admin].
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return s.complete(ctx, "force complete", k, "", resp, "1")
}

// scanCount is the COUNT hint of each SCAN call, and the most keys read in
// one pipeline.
const scanCount = 500

// InFlight implements [keystore.Admin]. It SCANs every master (every shard
// of a Ring) for the store's keys, so it costs one pass over the keyspace:
// it is for the admin API, never for the request path. A key under the
// prefix whose value is not a record (ErrCorrupt) is skipped and counted in
// the [*keystore.DamagedError] returned with the records.
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	return s.list(ctx, "in flight", "1", limit, func(rec keystore.Record, now int64) bool {
		return rec.State == keystore.StateInFlight && rec.Claimed.UnixMilli() <= now-olderThan.Milliseconds()
	})
}

// list SCANs every master (every shard of a Ring) for the records keep
// accepts (given each node's clock, in ms), oldest claim first, up to
// limit. bare is getScript's second argument ("1": no answers or infos;
// "2": no answers).
func (s *Store) list(ctx context.Context, name, bare string, limit int, keep func(rec keystore.Record, now int64) bool) ([]keystore.Record, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var (
		mu      sync.Mutex // protects out and damaged
		out     []keystore.Record
		damaged keystore.DamagedError
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		var dmg keystore.DamagedError
		recs, err := s.scanNode(ctx, c, bare, keep, &dmg)
		mu.Lock()
		out = append(out, recs...)
		damaged.Merge(&dmg)
		mu.Unlock()
		return err
	}
	var err error
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Ring:
		err = c.ForEachShard(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("unsupported client type %T", s.client)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstore: %s: %w", name, err)
	}
	slices.SortFunc(out, func(a, b keystore.Record) int { return a.Claimed.Compare(b.Claimed) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, damaged.OrNil()
}

// scanNode lists the records on one node that keep accepts, given that
// node's clock. It reads each key it finds with getScript, which knows
// both record formats, and adds the keys that hold no record to damaged.
func (s *Store) scanNode(ctx context.Context, c *redis.Client, bare string, keep func(rec keystore.Record, now int64) bool, damaged *keystore.DamagedError) ([]keystore.Record, error) {
	t, err := c.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	get := s.lua().get.script // one format for the whole listing
	if err := get.Load(ctx, c).Err(); err != nil {
		return nil, err
	}
	now := t.UnixMilli() + s.offset.Load()
	match := globEscape(s.prefix) + "{*"
	tls := s.prefix + rediskey.TLSTag // the TLS storage's keys: not records
	var out []keystore.Record
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return out, err
		}
		keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, tls) })
		if len(keys) > 0 {
			cmds := make([]*redis.Cmd, len(keys))
			run := func() error {
				pipe := c.Pipeline()
				for i, key := range keys {
					cmds[i] = get.EvalSha(ctx, pipe, []string{key}, s.offset.Load(), bare)
				}
				_, err := pipe.Exec(ctx)
				return err
			}
			err := run()
			if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				// The scripts were flushed since the Load (a failover to a
				// new master, SCRIPT FLUSH): load it again, once.
				if err = get.Load(ctx, c).Err(); err == nil {
					err = run()
				}
			}
			if err != nil {
				return out, err
			}
			for i, key := range keys {
				rec, ok, err := s.parseListed(key, cmds[i])
				if errors.Is(err, ErrCorrupt) {
					damaged.Add(key, err)
					continue
				}
				if err != nil {
					return out, err
				}
				if ok && keep(rec, now) {
					out = append(out, rec)
				}
			}
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}

// parseListed parses one getScript call of a listing. ok is false when the
// key vanished or its record expired.
func (s *Store) parseListed(key string, cmd *redis.Cmd) (rec keystore.Record, ok bool, err error) {
	k, kerr := keystore.ParseKey(strings.TrimSuffix(strings.TrimPrefix(key, s.prefix+"{"), "}"))
	if kerr != nil {
		return rec, false, fmt.Errorf("%w: %s: not a record key", ErrCorrupt, key)
	}
	v, err := cmd.Result()
	if err != nil {
		return rec, false, fmt.Errorf("redisstore: %s: %w", key, err)
	}
	code, rest, err := scriptReply(key, v)
	switch {
	case err != nil:
		return rec, false, err
	case code == codeNotFound:
		return rec, false, nil
	case code != codeOK:
		return rec, false, fmt.Errorf("redisstore: %s: unexpected reply code %d", key, code)
	}
	rec, err = parseRecord(k, rest)
	return rec, err == nil, err
}

// globEscape escapes the SCAN MATCH metacharacters in s.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// LoadScripts loads the current record format's library of functions on
// every master (FUNCTION LOAD), and its scripts into Redis's script cache,
// so that the first calls after a start are one round trip each, as the
// rest are: a function or script Redis does not have costs a refused call
// and a load (issue 31: the first keyed write took four round trips
// instead of two). Where Redis refuses functions (see [Store.Functions])
// the store goes on with the scripts, and that is no error. A failure
// only leaves the first calls to load them.
func (s *Store) LoadScripts(ctx context.Context) error {
	l := s.lua()
	var errs []error
	if !s.noFunctions.Load() {
		if err := s.loadLibrary(ctx, l.lib); err != nil && !s.noFunctions.Load() {
			errs = append(errs, err)
		}
	}
	for _, sc := range []lua{l.reserve, l.completeClaim, l.completeClaimMoved, l.releaseClaim, l.complete, l.release, l.renew, l.get} {
		if err := sc.script.Load(ctx, s.client).Err(); err != nil {
			errs = append(errs, fmt.Errorf("redisstore: load scripts: %w", err))
			break
		}
	}
	return errors.Join(errs...)
}

// Functions reports whether the store's calls run as Redis Functions
// (FCALL). It turns false, for good, when Redis refuses them: FCALL or
// FUNCTION LOAD unknown (a Redis before 7.0, a command renamed away) or
// refused to the ACL user; the calls then run with EVALSHA, the same code
// at about a fifth more of Redis's time per keyed write (BENCHMARKS.md,
// stop 22).
func (s *Store) Functions() bool { return !s.noFunctions.Load() }

// loadLibrary loads lib on every master of a Cluster (a node that a slot
// migrates to must have it too: a call redirected there with ASK runs
// there), every shard of a Ring, or the server of any other client, once for all the calls
// that ask while it runs (loads, keyed by the library's name). It sends
// FUNCTION LOAD without REPLACE: a library's name is the digest of its
// code, so a library of that name is this one, and Redis refuses it before
// compiling it (~65 µs, where a compile takes ~1.6 ms of Redis's time).
// Where Redis refuses FUNCTION LOAD for good (see [refusalOf]) the store
// turns to EVALSHA. The caller waits at most until ctx is done; the load
// goes on for the others, each command bounded by the client's timeouts.
func (s *Store) loadLibrary(ctx context.Context, lib *library) error {
	ch := s.loads.DoChan(lib.name, func() (any, error) {
		ctx := context.WithoutCancel(ctx)
		load := func(ctx context.Context, c redis.Cmdable) error {
			err := c.FunctionLoad(ctx, lib.code).Err()
			if redis.HasErrorPrefix(err, "Library '") && strings.HasSuffix(err.Error(), "already exists") {
				return nil
			}
			return err
		}
		var err error
		switch c := s.client.(type) {
		case *redis.ClusterClient:
			err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return load(ctx, m) })
		case *redis.Ring:
			err = c.ForEachShard(ctx, func(ctx context.Context, m *redis.Client) error { return load(ctx, m) })
		default:
			err = load(ctx, s.client)
		}
		if refusalOf(err) == refusedForGood {
			s.noFunctions.Store(true)
		}
		if err != nil {
			return nil, fmt.Errorf("redisstore: load functions: %w", err)
		}
		return nil, nil
	})
	select {
	case r := <-ch:
		return r.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ping checks that Redis answers, for health reports. It does not check
// every Cluster node.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redisstore: ping: %w", err)
	}
	return nil
}

// Close marks the store closed: later calls return [keystore.ErrClosed]. It
// does not close the client, which the caller owns (see [New]). It is
// idempotent.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// ms returns d in whole milliseconds, rounded up so that a positive d
// never becomes 0.
func ms(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

func integer(v []any, i int) int64 {
	if i >= len(v) {
		return 0
	}
	n, _ := v[i].(int64)
	return n
}

// stringBytes views a reply's string as bytes without copying, for
// DecodeResponse: the Response's Body then shares the string's memory,
// which nothing writes (a Reservation's Response is read-only).
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func str(v []any, i int) string {
	if i >= len(v) {
		return ""
	}
	s, _ := v[i].(string)
	return s
}
