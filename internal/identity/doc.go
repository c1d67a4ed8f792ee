// Package identity resolves who the client of a request is, for the scope
// that keeps one client's idempotency records from another's (DESIGN.md,
// "Identity"), and for route limits that count per identity.
//
// A [Resolver] is built from [Options] naming the identity's sources:
// request headers (their exact values), cookies (named cookies' values) and
// a JSON Web Token whose signature and claims are verified (the identity is
// then the configured claims' values, so a refreshed token of the same user
// is the same client). [Resolver.Resolve] returns a [Result] that is one of:
//
//   - [Present]: some source yielded a non-empty value; [Result.AppendScope]
//     and [Result.Sum] give the hashed identity, and [Result.Verified] says
//     whether it carries verified JWT claims;
//   - [Empty]: no source yielded a non-empty value (an empty Authorization
//     header is no identity);
//   - [Invalid]: a token was sent but does not verify; the proxy answers 401
//     idempotency_identity_invalid with [WWWAuthenticate] and runs nothing.
//     [Result.Err] says why, wrapping [ErrInvalid]; it never holds a token,
//     cookie or claim value;
//   - [Unavailable]: a token was sent but could not be checked: no key set
//     was ever loaded from the JWK Set URL, or a fetch of it did not end
//     within FetchWait. The proxy answers 503 idempotency_unavailable with
//     Retry-After (never 401, which tells a client to discard a good
//     token) and runs nothing. [Result.Err] wraps [ErrUnavailable];
//   - [Unreadable]: a cookie (of the identity or the JWT's) is spelled so
//     that upstreams read it differently; the proxy answers 400
//     request_invalid and runs nothing, since leaving it out would leave a
//     smaller identity that another client may have ([ErrUnreadable]).
//
// Cookies are read byte for byte from the raw Cookie header lines, not by
// net/http's parser, which drops values it finds invalid (see cookie.go's
// cookieValues): a value such as {"u":1} stays in the identity.
//
// # Scope bytes
//
// With headers only (the default ["Authorization"] and the old
// identity_headers alias), [Result.AppendScope] appends exactly the parts
// the proxy has always hashed into a store key (per header: the number of
// values, then the values as sent), so store keys stay byte-identical
// across the upgrade ([ScopeKey] is pinned against fixtures taken from the
// proxy before this package existed). Any other combination of sources
// appends a marker that no header-only scope can start with, then the
// SHA-256 of every configured source's value in a fixed order: headers in
// configured order, then cookies, then the JWT claims; empty values are
// skipped. Token, cookie and claim values are never stored or logged; what
// leaves this package is hashes, except a header-only scope's parts, which
// are the raw header values that [ScopeKey] (like the proxy before it)
// hashes into the store key.
//
// # Tokens
//
// Tokens come from a header ("Bearer <JWT>"; a header other than
// Authorization may also carry the bare token) or a cookie. An absent or
// empty header or cookie yields nothing; anything else that is not exactly
// one token (another scheme, two headers, two cookies) is Invalid. Tokens
// are parsed and
// verified with github.com/go-jose/go-jose/v4, and are accepted when all of
// this holds: the "alg" header is in the allow-list (never "none") and fits
// the key's type (RS*/PS* an RSA key, ES256/384/512 an ECDSA key on P-256,
// P-384, P-521, EdDSA an Ed25519 key, HS* the HMAC secret; a JWK's own
// "alg" must match too, and keys with "use": "enc" are skipped); the
// signature verifies with the key its "kid" names, or, without "kid", with
// any key whose type fits; "exp" is present and not past (with leeway);
// "nbf" and "iat", when present, are not in the future (with leeway); "iss"
// is one of the issuers and one of "aud" (a string or an array) one of the
// audiences, when those lists are set; the payload is one JSON object
// without duplicate member names; and every configured claim is present and
// not null. Claim values enter the identity as canonical JSON
// (internal/canonjson), so the number 1 and the string "1" differ.
//
// Keys come from a JWK Set file (checked for changes at most once a second,
// on the request path; a file that fails to parse keeps the keys in force),
// a JWK Set URL (fetched at start in the background, again after a short
// backoff — 200ms doubling to 5s — until a key set loads; then refreshed
// every RefreshInterval and on a token whose "kid" is unknown, at most once
// per MinRefreshInterval, so random kids cannot make a fetch per request;
// one fetch at a time, shared by every request waiting for it, each
// waiting at most FetchWait; while the endpoint fails, the keys last
// fetched keep verifying), or an HMAC secret.
//
// Verified tokens are cached by their SHA-256 until their "exp" (plus
// leeway, at most an hour), up to CacheSize entries, so a warm request costs
// a hash and a map look-up. An entry is used only while the key set it was
// verified with is still in force: a rotation that removes a key stops its
// tokens at once.
package identity
