// Package sealed encrypts the answers a [keystore.Store] keeps, so that
// neither Redis nor a memory dump of it shows response bodies or headers.
//
// [New] wraps any store. Each stored Response's Header and Body are sealed
// together with AES-256-GCM under a random 96-bit nonce; the sealed bytes go
// into the inner store's Response.Body as
//
//	version (1) | key id (1) | nonce (12) | ciphertext | tag (16)
//
// and its Header is nil. Status and TooLarge stay in clear (the proxy and the
// admin API read them), but they are authenticated with the record's key as
// additional data: a sealed answer moved to another key, or given another
// status, no longer opens. A record that does not open returns
// [ErrUnsealable], never a replay of garbage, and the proxy fails closed on
// it.
//
// Keys rotate without a flag day: New(inner, newKey, oldKey) seals with
// newKey and still opens what oldKey sealed, and [Store.SetKeys] changes the
// keys of a running Store (a config reload); [Wrap] makes a Store that
// seals nothing until it is given a key. Each sealed answer names its key
// by a one-byte id derived from the key, so opening tries only the keys with
// that id. With several replicas, first give every replica the new key as an
// old one, then make it current everywhere, then drop the old key once the
// retention has passed.
//
// Use a key for at most 2^32 answers (random nonces).
package sealed

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// ErrUnsealable is returned (wrapped, with the reason) when a stored answer
// cannot be opened: it was sealed with a key this Store does not have, was
// altered, moved to another record, or was never sealed.
var ErrUnsealable = errors.New("sealed: stored answer cannot be opened")

// KeySize is the length of a [Key]: AES-256.
const KeySize = 32

// Key is an AES-256 key. The zero Key is not valid; make one with
// [ParseKey].
type Key struct {
	b  [KeySize]byte
	ok bool
}

// ParseKey decodes a base64 key (standard or URL alphabet, with or without
// padding; surrounding white space ignored) of exactly 32 bytes, e.g. the
// output of `openssl rand -base64 32`. Its errors never include the key.
func ParseKey(s string) (Key, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Key{}, errors.New("sealed: empty key; want 32 bytes in base64")
	}
	var b []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil {
		return Key{}, errors.New("sealed: key is not valid base64; want 32 bytes in base64 (e.g. `openssl rand -base64 32`)")
	}
	if len(b) != KeySize {
		return Key{}, fmt.Errorf("sealed: key is %d bytes; want exactly %d (AES-256)", len(b), KeySize)
	}
	var k Key
	copy(k.b[:], b)
	k.ok = true
	clear(b)
	return k, nil
}

// ID returns the key's id, the byte stored beside each answer it seals: the
// first byte of a SHA-256 of the key. Two keys may share an id; opening then
// tries both.
func (k Key) ID() byte {
	h := sha256.Sum256(append([]byte("idemgate sealed key id\x00"), k.b[:]...))
	return h[0]
}

// Store wraps a [keystore.Store], sealing the answers it stores. It is safe
// for concurrent use. It implements [keystore.Admin] and
// [keystore.UnknownStore]; those methods return an error wrapping
// [errors.ErrUnsupported] when the inner store does not. It declares every
// method that carries an answer or an info; the others pass through
// ([keystore.Wrapper]).
type Store struct {
	keystore.Wrapper
	keys atomic.Pointer[keyring]
}

// A keyring is a Store's keys; SetKeys swaps it whole, so that a call
// seals and opens with one set.
type keyring struct {
	current *sealer                // nil: answers are stored as they come
	byID    map[byte][]cipher.AEAD // current and older keys
}

type sealer struct {
	id   byte
	aead cipher.AEAD
}

var (
	_ keystore.UnknownStore = (*Store)(nil)
	_ keystore.Admin        = (*Store)(nil)
)

// New returns a Store that seals with current and opens what current or any
// of older sealed. Close closes inner.
func New(inner keystore.Store, current Key, older ...Key) (*Store, error) {
	if !current.ok {
		return nil, errors.New("sealed: key 0 is the zero Key; use ParseKey")
	}
	s, err := Wrap(inner)
	if err != nil {
		return nil, err
	}
	if err := s.SetKeys(current, older...); err != nil {
		return nil, err
	}
	return s, nil
}

// Wrap returns a Store that stores answers as they come, and opens nothing,
// until [Store.SetKeys] gives it keys. Close closes inner.
func Wrap(inner keystore.Store) (*Store, error) {
	if inner == nil {
		return nil, errors.New("sealed: nil inner store")
	}
	s := &Store{Wrapper: keystore.Wrap(inner)}
	s.keys.Store(&keyring{})
	return s, nil
}

// SetKeys makes the Store seal with current from its next call on, and open
// what current or any of older sealed; calls already running finish with
// the keys they began with. The zero current Key stops sealing: answers are
// then stored as they come, and read as they are unless older opens them
// (answers sealed before stay readable while their key is among older). On
// error nothing changes.
func (s *Store) SetKeys(current Key, older ...Key) error {
	ring := &keyring{byID: map[byte][]cipher.AEAD{}}
	keys := append([]Key{current}, older...)
	for i, k := range keys {
		if !k.ok {
			if i == 0 {
				continue // sealing off
			}
			return fmt.Errorf("sealed: key %d is the zero Key; use ParseKey", i)
		}
		if slices.Contains(keys[:i], k) {
			continue
		}
		block, err := aes.NewCipher(k.b[:])
		if err != nil {
			return fmt.Errorf("sealed: key %d: %w", i, err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return fmt.Errorf("sealed: key %d: %w", i, err)
		}
		id := k.ID()
		if i == 0 {
			ring.current = &sealer{id: id, aead: aead}
		}
		ring.byID[id] = append(ring.byID[id], aead)
	}
	s.keys.Store(ring)
	return nil
}

// Sealing reports whether the Store seals the answers it stores, and the
// id of the key it seals them with.
func (s *Store) Sealing() (id byte, ok bool) {
	if c := s.keys.Load().current; c != nil {
		return c.id, true
	}
	return 0, false
}

// envelope layout.
const (
	envVersion = 1
	headerLen  = 2 // version, key id
)

// aad is what a sealed answer is bound to: its record's key, its status and
// TooLarge, and the envelope's own header.
func aad(k keystore.Key, status int, tooLarge bool, version, id byte) []byte {
	b := make([]byte, 0, 64)
	b = append(b, "idemgate sealed answer\x00"...)
	b = append(b, k[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(status)))
	if tooLarge {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return append(b, version, id)
}

// seal returns the Response the inner store keeps for resp under k: resp
// itself while the Store does not seal.
func (s *Store) seal(k keystore.Key, resp *keystore.Response) *keystore.Response {
	c := s.keys.Load().current
	if c == nil {
		return resp
	}
	if resp == nil {
		resp = &keystore.Response{}
	}
	plain := encodePlain(resp)
	out := make([]byte, headerLen, headerLen+len(plain)+c.aead.Overhead())
	out[0], out[1] = envVersion, c.id
	out = c.aead.Seal(out, nil, plain, aad(k, resp.Status, resp.TooLarge, envVersion, c.id))
	clear(plain)
	return &keystore.Response{Status: resp.Status, TooLarge: resp.TooLarge, Body: out}
}

// open returns the answer a sealed Response holds. While the Store seals,
// an answer that does not open is an error (ErrUnsealable: it fails
// closed, never replays what it cannot authenticate). While it does not
// (sealing turned off, or never on), an answer stored as it came is
// returned as it is, and one in a sealed envelope that none of its keys
// opens (sealed by a replica, or by a process before a restart, with a
// key this one lacks) is still an error, never replayed as its ciphertext.
func (s *Store) open(k keystore.Key, sealed *keystore.Response) (*keystore.Response, error) {
	ring := s.keys.Load()
	if ring.current == nil && !enveloped(sealed) {
		return sealed, nil
	}
	return ring.open(k, sealed)
}

// enveloped reports whether r has the shape of a sealed answer: no header,
// and a body of at least an envelope's header, nonce and tag that starts
// with the envelope's version. An answer stored as it came has a header
// (the proxy keeps one, empty or not); only an operator's repair with no
// header and such a body could look sealed, and it fails closed.
func enveloped(r *keystore.Response) bool {
	return r.Header == nil && len(r.Body) >= headerLen+12+16 && r.Body[0] == envVersion
}

func (ring *keyring) open(k keystore.Key, sealed *keystore.Response) (*keystore.Response, error) {
	if sealed.Header != nil || len(sealed.Body) < headerLen {
		return nil, fmt.Errorf("%w: not sealed", ErrUnsealable)
	}
	b := sealed.Body
	if b[0] != envVersion {
		return nil, fmt.Errorf("%w: unknown format %d", ErrUnsealable, b[0])
	}
	aeads := ring.byID[b[1]]
	if len(aeads) == 0 {
		return nil, fmt.Errorf("%w: sealed with key id %d, which this store does not have", ErrUnsealable, b[1])
	}
	ad := aad(k, sealed.Status, sealed.TooLarge, b[0], b[1])
	for _, a := range aeads {
		plain, err := a.Open(nil, nil, b[headerLen:], ad)
		if err != nil {
			continue
		}
		resp, err := decodePlain(plain)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrUnsealable, err)
		}
		resp.Status, resp.TooLarge = sealed.Status, sealed.TooLarge
		return resp, nil
	}
	return nil, fmt.Errorf("%w: authentication failed (altered, moved from another key, or sealed with another key of id %d)", ErrUnsealable, b[1])
}

// Reserve implements [keystore.Store]. A replay whose answer does not open
// returns ErrUnsealable.
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	res, err := s.Wrapper.Reserve(ctx, k, opts)
	if ue := (*keystore.UnknownError)(nil); errors.As(err, &ue) && ue.Info != nil {
		info, oerr := s.open(k, ue.Info)
		if oerr != nil {
			info = nil // the info is for the log only
		}
		return res, &keystore.UnknownError{Marked: ue.Marked, Info: info}
	}
	if err != nil {
		return res, err
	}
	if err := s.openIn(k, &res.Response); err != nil {
		return keystore.Reservation{}, err
	}
	return res, nil
}

// openIn opens the sealed answer *resp in place, if there is one.
func (s *Store) openIn(k keystore.Key, resp **keystore.Response) error {
	if *resp == nil {
		return nil
	}
	opened, err := s.open(k, *resp)
	if err != nil {
		return err
	}
	*resp = opened
	return nil
}

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Wrapper.Complete(ctx, k, token, s.seal(k, resp))
}

// CompleteClaim implements [keystore.Store]; resp is sealed like
// Complete's.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.Wrapper.CompleteClaim(ctx, k, c, s.seal(k, resp))
}

// Get implements [keystore.Store]. A completed record whose answer does not
// open returns ErrUnsealable.
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	rec, err := s.Wrapper.Get(ctx, k)
	if err != nil {
		return rec, err
	}
	if err := s.openIn(k, &rec.Info); err != nil {
		return keystore.Record{}, err
	}
	if err := s.openIn(k, &rec.Response); err != nil {
		return keystore.Record{}, err
	}
	return rec, nil
}

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	// A sealed answer that does not open is a damaged record: skipped and
	// counted, as the backends skip theirs.
	recs, err := s.Wrapper.InFlight(ctx, olderThan, limit)
	return keystore.MapListing(recs, err, func(rec keystore.Record) (keystore.Record, error) {
		err := s.openIn(rec.Key, &rec.Response)
		return rec, err
	})
}

// ForceComplete implements [keystore.Admin]; resp is sealed like Complete's.
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Wrapper.ForceComplete(ctx, k, s.seal(k, resp))
}

// The sealed plaintext:
//
//	flags  byte (1: Header non-nil, 2: Body non-nil, 4: Body compressed)
//	names  uvarint, then per name (sorted): uvarint len, name,
//	       uvarint count, per value: uvarint len, value
//	body   the remaining bytes
//
// plainCompressed carries [keystore.Response.Compressed] (keystore/compressed
// compresses before sealing). The releases before it refuse unknown flags:
// they read a compressed answer as unsealable (503), never as a body.
const (
	plainHeader     = 1 << 0
	plainBody       = 1 << 1
	plainCompressed = 1 << 2
)

var errBadPlain = errors.New("malformed sealed answer")

func encodePlain(r *keystore.Response) []byte {
	n := 1 + binary.MaxVarintLen32 + len(r.Body)
	names := make([]string, 0, len(r.Header))
	for k, vs := range r.Header {
		names = append(names, k)
		n += len(k) + 2*binary.MaxVarintLen32
		for _, v := range vs {
			n += len(v) + binary.MaxVarintLen32
		}
	}
	slices.Sort(names)
	b := make([]byte, 1, n)
	if r.Header != nil {
		b[0] |= plainHeader
	}
	if r.Body != nil {
		b[0] |= plainBody
	}
	if r.Compressed {
		b[0] |= plainCompressed | plainBody
	}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(len(r.Header[k])))
		for _, v := range r.Header[k] {
			b = appendString(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func decodePlain(b []byte) (*keystore.Response, error) {
	if len(b) == 0 || b[0]&^(plainHeader|plainBody|plainCompressed) != 0 ||
		b[0]&(plainCompressed|plainBody) == plainCompressed {
		return nil, errBadPlain
	}
	flags := b[0]
	b = b[1:]
	// count reads a uvarint no larger than the bytes left (each counted
	// item takes at least one byte), so input cannot force a big allocation.
	bad := false
	count := func() int {
		v, n := binary.Uvarint(b)
		if bad || n <= 0 || v > uint64(len(b)-n) {
			bad = true
			return 0
		}
		b = b[n:]
		return int(v)
	}
	str := func() string {
		l := count()
		if bad {
			return ""
		}
		s := string(b[:l])
		b = b[l:]
		return s
	}
	r := &keystore.Response{Compressed: flags&plainCompressed != 0}
	names := count()
	if flags&plainHeader != 0 {
		r.Header = make(http.Header, names)
	} else if names != 0 {
		return nil, errBadPlain
	}
	for range names {
		k := str()
		vs := make([]string, count())
		for i := range vs {
			vs[i] = str()
		}
		if bad {
			return nil, errBadPlain
		}
		r.Header[k] = vs
	}
	if bad {
		return nil, errBadPlain
	}
	if flags&plainBody != 0 {
		r.Body = b
	} else if len(b) != 0 {
		return nil, errBadPlain
	}
	return r, nil
}

// MarkSent implements [keystore.UnknownStore]; info (the original's
// method, path, key and request id) is sealed like an answer.
func (s *Store) MarkSent(ctx context.Context, k keystore.Key, token uint64, info *keystore.Response) error {
	if info == nil {
		info = &keystore.Response{}
	}
	return s.Wrapper.MarkSent(ctx, k, token, s.seal(k, info))
}

// Resolve implements [keystore.UnknownStore]; resp is sealed like
// Complete's.
func (s *Store) Resolve(ctx context.Context, k keystore.Key, id keystore.ClaimID, resp *keystore.Response) error {
	if resp != nil {
		resp = s.seal(k, resp)
	}
	return s.Wrapper.Resolve(ctx, k, id, resp)
}

// Unknown implements [keystore.UnknownStore]; an info that does not open
// is left out of its record.
func (s *Store) Unknown(ctx context.Context, limit int) ([]keystore.Record, error) {
	recs, err := s.Wrapper.Unknown(ctx, limit)
	for i := range recs {
		if recs[i].Info != nil {
			recs[i].Info, _ = s.open(recs[i].Key, recs[i].Info)
		}
	}
	return recs, err
}
