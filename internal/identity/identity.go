package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// WWWAuthenticate is the value of the WWW-Authenticate header of the 401
// idempotency_identity_invalid answer (RFC 6750 §3).
const WWWAuthenticate = `Bearer error="invalid_token"`

// Options configure a [Resolver]. The zero value resolves no identity at
// all: every request is [Empty]. The wiring applies the config's default
// (Headers ["Authorization"] when no source is configured); this package
// applies none.
type Options struct {
	// Headers are request headers whose exact values are part of the
	// identity, in this order. Names are canonicalized.
	Headers []string

	// Cookies are cookie names whose values are part of the identity, in
	// this order.
	Cookies []string

	// JWT, when non-nil, makes a verified token's claims part of the
	// identity.
	JWT *JWTOptions

	// Now is the clock for token times and cache and refresh intervals.
	// Default time.Now.
	Now func() time.Time

	// Logger receives key set loads and failures (never a token). Default:
	// discard.
	Logger *slog.Logger
}

// Resolver resolves the identity of requests. It is safe for concurrent
// use. A Resolver with a JWK Set URL owns a background fetch: call
// [Resolver.Close] when done.
type Resolver struct {
	headers []string
	cookies []string
	legacy  bool // headers only: scope parts as the proxy always hashed them
	jwt     *verifier
	now     func() time.Time
	log     *slog.Logger
}

// New checks o and builds a Resolver. With a JWK Set file it reads the file
// and fails when it holds no usable key; with a URL it starts fetching in
// the background, retrying with a short backoff until a key set loads, and
// does not wait for it (a token that arrives before then waits at most
// FetchWait for the fetch in flight, and is [Unavailable] if the keys are
// still missing).
func New(o Options) (*Resolver, error) {
	r := &Resolver{
		headers: canonical(o.Headers),
		cookies: slices.Clone(o.Cookies),
		now:     o.Now,
		log:     o.Logger,
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	for _, c := range r.cookies {
		if c == "" {
			return nil, errors.New("identity: empty cookie name")
		}
	}
	for _, h := range r.headers {
		if h == "" {
			return nil, errors.New("identity: empty header name")
		}
	}
	r.legacy = len(r.cookies) == 0 && o.JWT == nil
	if o.JWT != nil {
		v, err := newVerifier(*o.JWT, r.now, r.log)
		if err != nil {
			return nil, err
		}
		r.jwt = v
		if slices.Contains(r.headers, v.header) && v.header != "" {
			v.close()
			return nil, fmt.Errorf("identity: header %s is the JWT's own header; a JWT identity never also hashes the raw token", v.header)
		}
		if slices.Contains(r.cookies, v.cookie) && v.cookie != "" {
			v.close()
			return nil, fmt.Errorf("identity: cookie %s is the JWT's own cookie; a JWT identity never also hashes the raw token", v.cookie)
		}
	}
	return r, nil
}

func canonical(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
	return out
}

// Close stops the background work of a JWK Set URL and waits for it. It is
// idempotent; Resolve keeps working on the keys in hand afterwards.
func (r *Resolver) Close() error {
	if r.jwt != nil {
		r.jwt.close()
	}
	return nil
}

// Status is what a [Result] is.
type Status uint8

// Values of [Status].
const (
	// Empty means no source yielded a non-empty value.
	Empty Status = iota
	// Present means some source yielded a value and nothing failed.
	Present
	// Invalid means a token was sent and does not verify.
	Invalid
	// Unreadable means a source is present but cannot be read as one value
	// (a cookie whose end or name upstreams read differently; see
	// [ErrUnreadable]). The proxy answers 400 request_invalid: leaving the
	// source out would leave a smaller identity that another client may
	// have.
	Unreadable
	// Unavailable means a token was sent and could not be checked: no key
	// set was ever loaded from the JWK Set URL, or a fetch of it did not
	// end within FetchWait. The token may be good; the proxy answers 503
	// idempotency_unavailable with Retry-After, never 401, and runs
	// nothing.
	Unavailable
)

func (s Status) String() string {
	switch s {
	case Empty:
		return "empty"
	case Present:
		return "present"
	case Invalid:
		return "invalid"
	case Unreadable:
		return "unreadable"
	case Unavailable:
		return "unavailable"
	}
	return "Status(" + strconv.Itoa(int(s)) + ")"
}

// Result is a request's resolved identity. It holds hashes only, and, for
// header-only resolvers, a reference to the request's header (read again by
// [Result.AppendScope]); it must not outlive the request.
type Result struct {
	// Status says whether the identity is present, empty or invalid.
	Status Status
	// Verified is true when the identity carries verified JWT claims
	// (Status Present with a JWT source that yielded a token).
	Verified bool
	// Err is why the identity is Invalid (wrapping [ErrInvalid]) or
	// Unreadable (wrapping [ErrUnreadable]) or Unavailable (wrapping
	// [ErrUnavailable]); nil otherwise. Its text names
	// no token, cookie or claim value.
	Err error

	sum    [sha256.Size]byte // v2: SHA-256 of every source's value
	claims [sha256.Size]byte // the verified claims' hash (Verified only)
	hdr    http.Header       // legacy: the request's header
	names  []string          // legacy: the identity header names
	legacy bool
}

// scopeMarkerV2 starts the scope parts of a resolver that is not header
// only. A header-only scope's first part is a decimal count (or there is
// none), so the two forms never produce the same parts.
const scopeMarkerV2 = "identity/v2"

// AppendScope appends r's parts of a store key's scope to dst and returns
// the extended slice (see "Scope bytes" in the package documentation). An
// Invalid or Unavailable result must never scope a record (the proxy
// answers 401 or 503); its parts are a fixed placeholder that no valid
// identity has.
func (r Result) AppendScope(dst []string) []string {
	if r.legacy {
		for _, h := range r.names {
			vs := r.hdr.Values(h)
			dst = append(dst, strconv.Itoa(len(vs)))
			dst = append(dst, vs...)
		}
		return dst
	}
	return append(dst, scopeMarkerV2, string(r.sum[:]))
}

// Sum returns the SHA-256 of r's identity: the v2 sum, or for a
// header-only resolver the hash of its scope parts. Equal identities have
// equal sums; it is meant for logs' correlation and admin look-ups, never
// to be reversed.
func (r Result) Sum() [sha256.Size]byte {
	if !r.legacy {
		return r.sum
	}
	var arr [16]string
	return sumParts(r.AppendScope(arr[:0]))
}

// ScopeKey returns the store key of the idempotency key key sent under
// tenant by the client id: the SHA-256 of "v1", the tenant, id's scope
// parts and the key, each length-prefixed ([keystore.NewKey]). For
// header-only resolvers it is byte-identical to the keys the proxy made
// before this package existed.
func ScopeKey(tenant string, id Result, key string) keystore.Key {
	// AppendScope's logic again, inline, so that parts stays on the stack.
	var arr [16]string
	parts := append(arr[:0], "v1", tenant)
	if id.legacy {
		for _, h := range id.names {
			vs := id.hdr.Values(h)
			parts = append(parts, strconv.Itoa(len(vs)))
			parts = append(parts, vs...)
		}
	} else {
		parts = append(parts, scopeMarkerV2, string(id.sum[:]))
	}
	parts = append(parts, key)
	return keystore.NewKey(parts...)
}

// sumParts hashes parts length-prefixed, as keystore.NewKey does.
func sumParts(parts []string) [sha256.Size]byte {
	var arr [512]byte
	b := arr[:0]
	for _, p := range parts {
		b = binary.BigEndian.AppendUint64(b, uint64(len(p)))
		b = append(b, p...)
	}
	return sha256.Sum256(b)
}

// hasher builds a v2 identity input: length-prefixed parts.
type hasher struct {
	arr [512]byte
	b   []byte
}

func (h *hasher) add(parts ...string) {
	if h.b == nil {
		h.b = h.arr[:0]
	}
	for _, p := range parts {
		h.b = binary.BigEndian.AppendUint64(h.b, uint64(len(p)))
		h.b = append(h.b, p...)
	}
}

func (h *hasher) sum() [sha256.Size]byte { return sha256.Sum256(h.b) }

// Resolve resolves req's identity from its headers, cookies and token. A
// token is verified (or found in the cache of verified tokens); when no
// key set was loaded yet from a JWK Set URL, or the token's key is unknown
// and the URL may be fetched again, Resolve waits for that fetch at most
// FetchWait (and within req's context), and the token is Unavailable if
// it could not be checked by then.
func (r *Resolver) Resolve(req *http.Request) Result {
	if r.legacy {
		res := Result{legacy: true, hdr: req.Header, names: r.headers}
		for _, h := range r.headers {
			for _, v := range req.Header.Values(h) {
				if v != "" {
					res.Status = Present
				}
			}
		}
		return res
	}
	var h hasher
	present, err := r.addHeadersCookies(&h, req.Header)
	if err != nil {
		return Result{Status: Unreadable, Err: err}
	}
	res := Result{}
	if r.jwt != nil {
		tok, err := r.jwt.token(req)
		switch {
		case errors.Is(err, ErrUnreadable):
			return Result{Status: Unreadable, Err: err}
		case err != nil:
			return Result{Status: Invalid, Err: err}
		case tok != "":
			claims, err := r.jwt.verify(req.Context(), tok)
			if errors.Is(err, ErrUnavailable) {
				return Result{Status: Unavailable, Err: err}
			}
			if err != nil {
				return Result{Status: Invalid, Err: err}
			}
			res.claims, res.Verified, present = claims, true, true
			h.add("j", string(claims[:]))
		default:
			h.add("j")
		}
	}
	if present {
		res.Status = Present
	}
	res.sum = h.sum()
	return res
}

// addHeadersCookies adds the header and cookie sources to h and reports
// whether any yielded a non-empty value. Cookies come from hdr's Cookie
// lines, read by [cookieValues]; an unreadable one is an error wrapping
// [ErrUnreadable].
func (r *Resolver) addHeadersCookies(h *hasher, hdr http.Header) (bool, error) {
	present := false
	h.add(scopeMarkerV2)
	for _, name := range r.headers {
		h.add("h", name)
		for _, v := range hdr.Values(name) {
			if v != "" {
				h.add(v)
				present = true
			}
		}
	}
	if len(r.cookies) > 0 {
		lines := hdr["Cookie"]
		for _, name := range r.cookies {
			h.add("c", name)
			err := cookieValues(lines, name, func(v string) {
				if v != "" {
					h.add(v)
					present = true
				}
			})
			if err != nil {
				return false, err
			}
		}
	}
	return present, nil
}

// Lookup resolves the identity an operator names for an admin look-up,
// without a token: headers and cookies (a Cookie header) from hdr, and, for
// a JWT resolver, claims holding every configured claim's JSON value (as
// the token would carry it; formatting does not matter). It returns the
// same Result as [Resolver.Resolve] on a request with those headers,
// cookies and a verified token with those claims. A JWT resolver needs
// either no claims at all (no token) or all of them.
func (r *Resolver) Lookup(hdr http.Header, claims map[string]json.RawMessage) (Result, error) {
	if r.legacy {
		if len(claims) > 0 {
			return Result{}, errors.New("identity: claims given, but the identity has no JWT source")
		}
		req := &http.Request{Header: hdr}
		return r.Resolve(req), nil
	}
	var h hasher
	present, err := r.addHeadersCookies(&h, hdr)
	if err != nil {
		return Result{}, err
	}
	res := Result{}
	switch {
	case r.jwt == nil && len(claims) > 0:
		return Result{}, errors.New("identity: claims given, but the identity has no JWT source")
	case r.jwt != nil && len(claims) == 0:
		h.add("j")
	case r.jwt != nil:
		sum, err := r.jwt.claimsSum(claims)
		if err != nil {
			return Result{}, err
		}
		res.claims, res.Verified, present = sum, true, true
		h.add("j", string(sum[:]))
	}
	if present {
		res.Status = Present
	}
	res.sum = h.sum()
	return res, nil
}

// Stats are a Resolver's counters since New, for metrics.
type Stats struct {
	CacheHits, CacheMisses uint64 // verified-token cache
	CacheEntries           int
	KeySetLoads            uint64 // JWK Sets loaded (file reads or fetches that changed nothing count too)
	KeySetErrors           uint64 // JWK Set reads or fetches that failed (the keys in force were kept)
}

// Stats returns r's counters. Without a JWT source they are all zero.
func (r *Resolver) Stats() Stats {
	if r.jwt == nil {
		return Stats{}
	}
	v := r.jwt
	return Stats{
		CacheHits:    v.cache.hits.Load(),
		CacheMisses:  v.cache.misses.Load(),
		CacheEntries: v.cache.len(),
		KeySetLoads:  v.keys.stats().loads.Load(),
		KeySetErrors: v.keys.stats().errors.Load(),
	}
}

type keyStats struct{ loads, errors atomic.Uint64 }

// HeaderNames returns the request headers the identity reads, canonical:
// the configured headers and the JWT's own header, if it has one (a
// reconcile probe carries them). The slice is a new one.
func (r *Resolver) HeaderNames() []string {
	out := slices.Clone(r.headers)
	if r.jwt != nil && r.jwt.header != "" {
		out = append(out, textproto.CanonicalMIMEHeaderKey(r.jwt.header))
	}
	return out
}
