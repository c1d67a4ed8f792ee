package identity

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/canonjson"
)

// Sentinel errors. Every error of an Invalid [Result] wraps ErrInvalid and
// one of the others.
var (
	ErrInvalid      = errors.New("identity invalid")
	ErrMalformed    = errors.New("malformed token")
	ErrAmbiguous    = errors.New("more than one token")
	ErrAlgorithm    = errors.New("algorithm not allowed")
	ErrUnknownKey   = errors.New("no key fits the token")
	ErrSignature    = errors.New("signature does not verify")
	ErrExpired      = errors.New("token expired")
	ErrNotYetValid  = errors.New("token not yet valid")
	ErrIssuer       = errors.New("issuer not accepted")
	ErrAudience     = errors.New("audience not accepted")
	ErrClaimMissing = errors.New("claim missing")

	// ErrUnavailable is the error of an [Unavailable] Result: the token
	// could not be checked, because no key set was ever loaded from the JWK
	// Set URL or a fetch of it did not end within FetchWait. It does not
	// wrap ErrInvalid: the token may be good.
	ErrUnavailable = errors.New("keys unavailable")
)

func invalid(sentinel error, format string, args ...any) error {
	if format == "" {
		return fmt.Errorf("%w: %w", ErrInvalid, sentinel)
	}
	return fmt.Errorf("%w: %w: %s", ErrInvalid, sentinel, fmt.Sprintf(format, args...))
}

// Algorithms are the JWS algorithms a token may be signed with (RFC 7518
// §3.1 and RFC 8037), in the order documentation lists them. "none" is not
// among them and never will be.
var Algorithms = []string{
	"RS256", "RS384", "RS512", "PS256", "PS384", "PS512",
	"ES256", "ES384", "ES512", "EdDSA", "HS256", "HS384", "HS512",
}

// DefaultAlgorithms is the allow-list when [JWTOptions.Algorithms] is empty.
var DefaultAlgorithms = []string{"RS256", "ES256", "EdDSA"}

// DefaultClaims are the claims that make the identity when
// [JWTOptions.Claims] is empty.
var DefaultClaims = []string{"iss", "sub"}

// IsHMAC reports whether alg is one of HS256, HS384 and HS512.
func IsHMAC(alg string) bool { return alg == "HS256" || alg == "HS384" || alg == "HS512" }

// JWTOptions configure the JWT source. Exactly one key source is set:
// JWKSFile, JWKSURL or HMACSecret.
type JWTOptions struct {
	// Header carries the token as "Bearer <JWT>" (for Authorization the
	// scheme is required; for another header it is optional). Default
	// "Authorization" when Cookie is empty.
	Header string
	// Cookie carries the token instead of a header.
	Cookie string

	// Claims are the claims whose values are the identity, in this order.
	// Default [DefaultClaims].
	Claims []string

	// JWKSFile is a JWK Set file, checked for changes at most once a
	// second.
	JWKSFile string
	// JWKSURL is a JWK Set URL (http or https).
	JWKSURL string
	// HMACSecret is the HS256/384/512 secret: at least 32 bytes, and at
	// least 48 or 64 for HS384 or HS512.
	HMACSecret []byte

	// Issuers are the accepted "iss" values; empty accepts any.
	Issuers []string
	// Audiences are the accepted "aud" values (one match passes); empty
	// accepts any.
	Audiences []string
	// Algorithms is the allow-list; default [DefaultAlgorithms]. HS* only
	// with HMACSecret, and only HS* with it.
	Algorithms []string
	// Leeway is the clock skew allowed for exp, nbf and iat; negative is an
	// error. The config's default is 30s; here zero means none.
	Leeway time.Duration

	// CacheSize bounds the cache of verified tokens. Default 65,536.
	CacheSize int
	// HTTPClient fetches JWKSURL. Default: a client of its own with a 10s
	// timeout.
	HTTPClient *http.Client
	// RefreshInterval is how often JWKSURL is fetched again in the
	// background (on the first request after it). Default 1h.
	RefreshInterval time.Duration
	// MinRefreshInterval bounds fetches of JWKSURL caused by unknown "kid"s
	// (and failed refreshes' retries) once a key set is loaded: at most one
	// per interval. Default 30s.
	MinRefreshInterval time.Duration
	// FetchWait is the longest a request waits for a fetch of JWKSURL in
	// flight (the first, or one for an unknown "kid"); a token that the
	// keys in hand cannot check then is [Unavailable]. The fetch goes on in
	// the background and every request shares it. Default 1s.
	FetchWait time.Duration
	// LoadBackoff is the wait after the attempt-th (from 0) failed fetch of
	// JWKSURL while no key set was ever loaded. Default: 200ms doubling to
	// 5s, each drawn from its upper half.
	LoadBackoff func(attempt int) time.Duration
}

// maxTokenBytes caps a token: larger ones are malformed without parsing.
const maxTokenBytes = 16 << 10

// maxCacheTTL caps how long a verified token is cached, whatever its exp.
const maxCacheTTL = time.Hour

type verifier struct {
	header, cookie string
	bearerRequired bool
	claimNames     []string
	algs           []jose.SignatureAlgorithm
	allowed        map[string]bool
	issuers        []string
	audiences      []string
	leeway         time.Duration
	keys           keySource
	cache          *tokenCache
	now            func() time.Time
}

func newVerifier(o JWTOptions, now func() time.Time, log *slog.Logger) (*verifier, error) {
	v := &verifier{
		header:     o.Header,
		cookie:     o.Cookie,
		claimNames: slices.Clone(o.Claims),
		issuers:    slices.Clone(o.Issuers),
		audiences:  slices.Clone(o.Audiences),
		leeway:     o.Leeway,
		now:        now,
		allowed:    map[string]bool{},
	}
	if v.header != "" && v.cookie != "" {
		return nil, errors.New("identity: jwt: set header or cookie, not both")
	}
	if v.header == "" && v.cookie == "" {
		v.header = "Authorization"
	}
	if v.header != "" {
		v.header = textproto.CanonicalMIMEHeaderKey(v.header)
		v.bearerRequired = v.header == "Authorization"
	}
	if len(v.claimNames) == 0 {
		v.claimNames = slices.Clone(DefaultClaims)
	}
	for _, c := range v.claimNames {
		if c == "" {
			return nil, errors.New("identity: jwt: empty claim name")
		}
	}
	if v.leeway < 0 {
		return nil, errors.New("identity: jwt: negative leeway")
	}
	algs := o.Algorithms
	if len(algs) == 0 {
		algs = DefaultAlgorithms
	}
	hmac := 0
	for _, a := range algs {
		if !slices.Contains(Algorithms, a) {
			return nil, fmt.Errorf("identity: jwt: algorithm %q is not one of %s", a, strings.Join(Algorithms, ", "))
		}
		if IsHMAC(a) {
			hmac++
		}
		v.allowed[a] = true
		v.algs = append(v.algs, jose.SignatureAlgorithm(a))
	}
	sources := 0
	for _, set := range []bool{o.JWKSFile != "", o.JWKSURL != "", o.HMACSecret != nil} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return nil, errors.New("identity: jwt: set exactly one of jwks_file, jwks_url and an HMAC secret")
	}
	switch {
	case o.HMACSecret != nil:
		if hmac != len(algs) {
			return nil, errors.New("identity: jwt: an HMAC secret needs algorithms HS256, HS384 or HS512, and only those")
		}
		for _, a := range algs {
			if need := hmacMinBytes(a); len(o.HMACSecret) < need {
				return nil, fmt.Errorf("identity: jwt: the HMAC secret has %d bytes; %s needs at least %d", len(o.HMACSecret), a, need)
			}
		}
		v.keys = newStaticKeys(o.HMACSecret)
	default:
		if hmac > 0 {
			return nil, errors.New("identity: jwt: HS* algorithms need an HMAC secret, not a JWK Set")
		}
		var err error
		if o.JWKSFile != "" {
			v.keys, err = newFileKeys(o.JWKSFile, now, log)
		} else {
			v.keys, err = newURLKeys(o, now, log)
		}
		if err != nil {
			return nil, err
		}
	}
	size := o.CacheSize
	if size <= 0 {
		size = 1 << 16
	}
	v.cache = newTokenCache(size)
	return v, nil
}

func hmacMinBytes(alg string) int {
	switch alg {
	case "HS384":
		return 48
	case "HS512":
		return 64
	}
	return 32
}

func (v *verifier) close() { v.keys.close() }

// token returns the request's token: "" when the source yields nothing,
// an error when it yields something that is no single token.
func (v *verifier) token(req *http.Request) (string, error) {
	if v.cookie != "" {
		tok, n := "", 0
		err := cookieValues(req.Header["Cookie"], v.cookie, func(val string) {
			if val != "" {
				tok = val
				n++
			}
		})
		switch {
		case err != nil:
			return "", err
		case n > 1:
			return "", invalid(ErrAmbiguous, "cookie %s sent more than once", v.cookie)
		}
		return tok, nil
	}
	vals := req.Header.Values(v.header)
	tok := ""
	for _, val := range vals {
		if val == "" {
			continue
		}
		if tok != "" {
			return "", invalid(ErrAmbiguous, "header %s sent more than once", v.header)
		}
		t, ok := bearer(val)
		if !ok {
			if v.bearerRequired {
				return "", invalid(ErrMalformed, "header %s is not \"Bearer <token>\"", v.header)
			}
			t = strings.TrimSpace(val)
		}
		if t == "" {
			return "", invalid(ErrMalformed, "header %s has an empty token", v.header)
		}
		tok = t
	}
	return tok, nil
}

// bearer cuts the "Bearer" scheme (any case, RFC 9110 §11.1) from val.
func bearer(val string) (string, bool) {
	const scheme = "bearer"
	if len(val) < len(scheme) || !strings.EqualFold(val[:len(scheme)], scheme) {
		return "", false
	}
	rest := val[len(scheme):]
	if rest == "" {
		return "", true
	}
	if rest[0] != ' ' && rest[0] != '\t' {
		return "", false
	}
	return strings.TrimSpace(rest), true
}

// verify checks tok and returns the hash of its configured claims, from the
// cache when tok was verified before with the key set still in force.
func (v *verifier) verify(ctx context.Context, tok string) ([sha256.Size]byte, error) {
	now := v.now()
	set := v.keys.current(ctx, now)
	id := sha256.Sum256([]byte(tok))
	if e, ok := v.cache.get(id, set.gen, now); ok {
		return e, nil
	}
	sum, until, set, err := v.verifyCold(ctx, tok, set, now)
	if err != nil {
		return sum, err
	}
	if until.After(now) {
		v.cache.put(id, cacheEntry{until: until.UnixNano(), gen: set.gen, claims: sum}, now)
	}
	return sum, nil
}

// verifyCold verifies tok's signature and claims. It returns the claims'
// hash, the time until which the token is valid, and the key set it was
// verified with.
func (v *verifier) verifyCold(ctx context.Context, tok string, set *keySet, now time.Time) (sum [sha256.Size]byte, until time.Time, _ *keySet, err error) {
	if len(tok) > maxTokenBytes {
		return sum, until, set, invalid(ErrMalformed, "longer than %d bytes", maxTokenBytes)
	}
	if !compactJWS(tok) {
		return sum, until, set, invalid(ErrMalformed, "")
	}
	jws, err := jose.ParseSignedCompact(tok, v.algs)
	if err != nil {
		var algErr *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &algErr) {
			return sum, until, set, invalid(ErrAlgorithm, "")
		}
		return sum, until, set, invalid(ErrMalformed, "")
	}
	if len(jws.Signatures) != 1 {
		return sum, until, set, invalid(ErrMalformed, "")
	}
	hdr := jws.Signatures[0].Header
	alg := hdr.Algorithm
	if !v.allowed[alg] {
		return sum, until, set, invalid(ErrAlgorithm, "")
	}
	cands := set.candidates(hdr.KeyID, alg)
	if set.gen == 0 || len(cands) == 0 && hdr.KeyID != "" {
		// No keys yet (a JWK Set URL not fetched so far), or an unknown
		// kid: the keys may have rotated.
		var done bool
		set, done = v.keys.refresh(ctx, now)
		cands = set.candidates(hdr.KeyID, alg)
		switch {
		case len(cands) > 0:
		case set.gen == 0:
			return sum, until, set, fmt.Errorf("%w: no JWK Set loaded yet", ErrUnavailable)
		case !done:
			return sum, until, set, fmt.Errorf("%w: the JWK Set fetch did not end in time", ErrUnavailable)
		}
	}
	if len(cands) == 0 {
		return sum, until, set, invalid(ErrUnknownKey, "")
	}
	var payload []byte
	for _, k := range cands {
		if p, err := jws.Verify(k.pub); err == nil {
			payload = p
			break
		}
	}
	if payload == nil {
		return sum, until, set, invalid(ErrSignature, "")
	}
	claims, err := parseClaims(payload)
	if err != nil {
		return sum, until, set, err
	}
	until, err = v.checkClaims(claims, now)
	if err != nil {
		return sum, until, set, err
	}
	sum, err = v.claimsSumCanonical(claims)
	return sum, until, set, err
}

// compactJWS reports whether tok looks like a JWS in compact form: three
// non-empty segments of canonical unpadded base64url (the unused low bits
// of a segment's last character zero, as RFC 4648 §3.5 encoders write
// them), so that one token has one spelling: a re-spelled token neither
// takes a second cache entry nor passes for another token.
func compactJWS(tok string) bool {
	dots := 0
	start := 0
	for i := 0; i <= len(tok); i++ {
		if i == len(tok) || tok[i] == '.' {
			if !canonicalB64(tok[start:i]) {
				return false
			}
			if i < len(tok) {
				dots++
			}
			start = i + 1
			continue
		}
		if b64Value(tok[i]) < 0 {
			return false
		}
	}
	return dots == 2
}

// canonicalB64 reports whether seg, made of base64url characters, is a
// non-empty canonical unpadded encoding.
func canonicalB64(seg string) bool {
	switch len(seg) % 4 {
	case 0:
		return len(seg) > 0
	case 1:
		return false
	case 2:
		return b64Value(seg[len(seg)-1])&0x0f == 0
	}
	return b64Value(seg[len(seg)-1])&0x03 == 0
}

// b64Value returns the value of a base64url character, or -1.
func b64Value(c byte) int {
	switch {
	case 'A' <= c && c <= 'Z':
		return int(c - 'A')
	case 'a' <= c && c <= 'z':
		return int(c-'a') + 26
	case '0' <= c && c <= '9':
		return int(c-'0') + 52
	case c == '-':
		return 62
	case c == '_':
		return 63
	}
	return -1
}

// parseClaims canonicalizes a JWT payload and returns its members. The
// payload must be one JSON object without duplicate member names.
func parseClaims(payload []byte) (map[string]json.RawMessage, error) {
	canon, ok := canonjson.Append(nil, payload, nil)
	if !ok || len(canon) == 0 || canon[0] != '{' {
		return nil, invalid(ErrMalformed, "the payload is not one JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(canon, &m); err != nil {
		return nil, invalid(ErrMalformed, "the payload is not one JSON object")
	}
	return m, nil
}

// checkClaims checks the registered claims at now and returns the time
// until which the token is valid (exp plus leeway).
func (v *verifier) checkClaims(c map[string]json.RawMessage, now time.Time) (time.Time, error) {
	nowS := float64(now.UnixNano()) / 1e9
	lee := v.leeway.Seconds()
	exp, ok, err := numericDate(c, "exp")
	switch {
	case err != nil:
		return time.Time{}, err
	case !ok:
		return time.Time{}, invalid(ErrClaimMissing, "exp is required")
	case nowS >= exp+lee:
		return time.Time{}, invalid(ErrExpired, "")
	}
	if nbf, ok, err := numericDate(c, "nbf"); err != nil {
		return time.Time{}, err
	} else if ok && nowS+lee < nbf {
		return time.Time{}, invalid(ErrNotYetValid, "nbf")
	}
	if iat, ok, err := numericDate(c, "iat"); err != nil {
		return time.Time{}, err
	} else if ok && nowS+lee < iat {
		return time.Time{}, invalid(ErrNotYetValid, "iat is in the future")
	}
	if len(v.issuers) > 0 {
		var iss string
		raw, ok := c["iss"]
		if !ok || json.Unmarshal(raw, &iss) != nil || !slices.Contains(v.issuers, iss) {
			return time.Time{}, invalid(ErrIssuer, "")
		}
	}
	if len(v.audiences) > 0 && !v.audienceOK(c["aud"]) {
		return time.Time{}, invalid(ErrAudience, "")
	}
	// exp+leeway in seconds, clamped so that a far-future exp cannot
	// overflow: the cache caps the entry's life anyway.
	end := min(exp+lee, nowS+maxCacheTTL.Seconds())
	sec, frac := math.Modf(end)
	return time.Unix(int64(sec), int64(frac*1e9)), nil
}

// numericDate reads an RFC 7519 NumericDate claim: a JSON number of
// seconds. A claim that is there but no finite number is malformed.
func numericDate(c map[string]json.RawMessage, name string) (float64, bool, error) {
	raw, ok := c[name]
	if !ok {
		return 0, false, nil
	}
	s := string(raw)
	if s == "" || !(s[0] == '-' || '0' <= s[0] && s[0] <= '9') {
		return 0, false, invalid(ErrMalformed, "%s is not a number", name)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false, invalid(ErrMalformed, "%s is not a number", name)
	}
	return f, true, nil
}

// audienceOK reports whether aud (a string or an array of strings) holds
// one of the accepted audiences.
func (v *verifier) audienceOK(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return false
	}
	var auds []string
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return false
		}
		auds = []string{s}
	} else if json.Unmarshal(raw, &auds) != nil {
		return false
	}
	for _, a := range auds {
		if slices.Contains(v.audiences, a) {
			return true
		}
	}
	return false
}

// claimsSumCanonical hashes the configured claims of a canonical payload.
func (v *verifier) claimsSumCanonical(c map[string]json.RawMessage) ([sha256.Size]byte, error) {
	var h hasher
	for _, name := range v.claimNames {
		raw, ok := c[name]
		if !ok || string(raw) == "null" {
			return [sha256.Size]byte{}, invalid(ErrClaimMissing, "claim %q", name)
		}
		h.add(name, string(raw))
	}
	return h.sum(), nil
}

// claimsSum hashes claims given for a look-up: every configured claim must
// be there; values are canonicalized first.
func (v *verifier) claimsSum(claims map[string]json.RawMessage) ([sha256.Size]byte, error) {
	canon := make(map[string]json.RawMessage, len(claims))
	for name, raw := range claims {
		if !slices.Contains(v.claimNames, name) {
			return [sha256.Size]byte{}, fmt.Errorf("identity: claim %q is not one of the identity's claims %v", name, v.claimNames)
		}
		b, ok := canonjson.Append(nil, raw, nil)
		if !ok {
			return [sha256.Size]byte{}, fmt.Errorf("identity: claim %q: not one JSON value", name)
		}
		canon[name] = b
	}
	sum, err := v.claimsSumCanonical(canon)
	if err != nil {
		return sum, fmt.Errorf("identity: every claim of %v is needed: %w", v.claimNames, err)
	}
	return sum, nil
}
