package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"math"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/internal/canonform"
	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/gql"
	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/limiter"
)

// currentFingerprint is the fingerprint version this build writes (DESIGN.md,
// Fingerprint): version 2, and form bodies by their parameters (kind form).
// Records of an older version are compared in that version: version 2 by
// [fingerprintHeld] without forms, [keystore.FingerprintV1] by
// [fingerprintV1].
const currentFingerprint keystore.FingerprintVersion = 3

// fingerprintV2 is revision 2's fingerprint: without the route's name, on
// the RFC 3986 normalized path, with the body's kind (json or raw), over the
// decoded body. A form body is raw in it.
const fingerprintV2 keystore.FingerprintVersion = 2

// The kinds of body a fingerprint marks, so that a raw body never equals a
// JSON one.
const (
	fingerprintV2Byte = "\x02" // starts every fingerprintV2 hash
	fingerprintV3Byte = "\x03" // starts every currentFingerprint hash

	kindJSON    = "json"
	kindForm    = "form"
	kindRaw     = "raw"
	kindGraphQL = "graphql"
)

// versionByte is the byte that starts a hash of version v (2 or 3).
func versionByte(v keystore.FingerprintVersion) string {
	if v == fingerprintV2 {
		return fingerprintV2Byte
	}
	return fingerprintV3Byte
}

// fingerprintState holds the reusable buffers of one fingerprint.
type fingerprintState struct {
	h     hash.Hash
	head  []byte
	canon []byte
	form  canonform.Form
	// held is the body the fingerprint running now charges (nil: none),
	// and charge its Charge, made once per pooled state: a method value
	// made per request is an allocation (issue 31).
	held   *budget.Body
	charge func(int64) error
}

// keepCanonMax is the largest canonical-JSON buffer a pooled
// fingerprintState keeps. A pooled buffer is not charged to
// max_buffered_bytes once its request is done, and the pool keeps one per
// fingerprint that ran at once (through a GC): with 1 MiB kept, many
// clients' big bodies left tens of MiB live outside the budget (issue 28).
// Bigger canonical forms are allocated afresh, charged, and collected.
const keepCanonMax = 64 << 10

var fingerprintPool = sync.Pool{New: func() any {
	st := &fingerprintState{h: sha256.New(), head: make([]byte, 0, 256), canon: make([]byte, 0, 4096)}
	st.charge = func(n int64) error { return st.held.Charge(n) }
	return st
}}

// sum hashes the head parts, each length-prefixed after the first byte
// pre ("" for none), then payload, length-prefixed.
func (st *fingerprintState) sum(pre string, parts [4]string, payload []byte) keystore.Fingerprint {
	st.writeHead(pre, parts, len(payload))
	st.h.Write(payload)
	return st.fingerprint()
}

// fingerprint returns the hash's sum. It is summed into st's own buffer:
// a local array passed to the hash.Hash interface escapes (an allocation).
func (st *fingerprintState) fingerprint() keystore.Fingerprint {
	var fp keystore.Fingerprint
	copy(fp[:], st.h.Sum(st.head[:0]))
	return fp
}

// sumForm is [fingerprintState.sum] with st.form's encoding, its pairs in
// order, as the payload.
func (st *fingerprintState) sumForm(pre string, parts [4]string) keystore.Fingerprint {
	st.writeHead(pre, parts, st.form.Len())
	st.form.WriteTo(st.h)
	return st.fingerprint()
}

// writeHead resets the hash and writes pre, the parts and the payload's
// length.
func (st *fingerprintState) writeHead(pre string, parts [4]string, payloadLen int) {
	h := st.h
	h.Reset()
	// The head parts go through one buffer and one Write: a Write per part
	// on the hash.Hash interface allocates.
	head := append(st.head[:0], pre...)
	for _, s := range parts {
		head = binary.BigEndian.AppendUint64(head, uint64(len(s)))
		head = append(head, s...)
	}
	head = binary.BigEndian.AppendUint64(head, uint64(payloadLen))
	h.Write(head)
	if cap(head) <= 64<<10 {
		st.head = head[:0]
	}
}

// keepCanon keeps c's buffer for the next fingerprint unless it grew past
// keepCanonMax.
func (st *fingerprintState) keepCanon(c []byte) {
	if cap(c) <= keepCanonMax {
		st.canon = c[:0]
	}
}

// fingerprint returns the SHA-256 of what makes two requests the same, in
// version [currentFingerprint] (DESIGN.md, Fingerprint): a version byte, the
// method, escapedPath after RFC 3986 normalization
// ([pathtmpl.NormalizeRFC3986]; as sent if it cannot be normalized), the
// raw query, the body's kind and the body — canonical JSON (without the
// ignore pointers), kind json, when contentType is application/json or
// *+json and the body parses; the form's pairs ([canonform]; without the
// parameters the ignore pointers name literally), kind form, when
// contentType is application/x-www-form-urlencoded and the body parses;
// else the raw bytes, kind raw. body is the body after its
// Content-Encoding was undone. Each part is length-prefixed, so no two
// different requests share an encoding. The route's name is not part of
// it.
func fingerprint(method, escapedPath, rawQuery, contentType string, body []byte, ignore []canonjson.Pointer) keystore.Fingerprint {
	fp, _ := fingerprintHeld(currentFingerprint, method, escapedPath, rawQuery, contentType, body, fingerprintIgnore{ignore, formIgnore(ignore)}, nil)
	return fp
}

// fingerprintIgnore is a route's fingerprint_ignore: JSON pointers for JSON
// bodies, and the same entries without their leading "/" as literal
// parameter names for form bodies.
type fingerprintIgnore struct {
	json []canonjson.Pointer
	form []string
}

// formIgnore returns the form parameter names that JSON pointers name:
// each pointer as written, without its leading "/".
func formIgnore(ignore []canonjson.Pointer) []string {
	var names []string
	for _, p := range ignore {
		if s := p.String(); s != "" {
			names = append(names, s[1:])
		}
	}
	return names
}

// fingerprintHeld is [fingerprint] in version v (currentFingerprint or
// fingerprintV2, which hashes forms raw), with the canonical JSON's or the
// form's memory charged to held, the body's hold on max_buffered_bytes
// (DESIGN.md, Bounds), and given back once hashed; nil charges nothing. It
// fails only when the budget refuses the charge (an error wrapping
// budget.ErrOverloaded).
func fingerprintHeld(v keystore.FingerprintVersion, method, escapedPath, rawQuery, contentType string, body []byte, ignore fingerprintIgnore, held *budget.Body) (keystore.Fingerprint, error) {
	st := fingerprintPool.Get().(*fingerprintState)
	defer fingerprintPool.Put(st)
	var charge func(int64) error
	if held != nil {
		st.held, charge = held, st.charge
		defer func() { st.held = nil }() // before the Put above
	}
	pre := versionByte(v)
	kind, payload := kindRaw, body
	if v != fingerprintV2 && canonform.IsForm(contentType) {
		charged, ok, err := st.form.Parse(body, ignore.form, charge)
		defer st.form.Reset(1 << 20)
		if held != nil {
			defer held.Uncharge(charged)
		}
		if err != nil {
			return keystore.Fingerprint{}, err
		}
		if ok {
			return st.sumForm(pre, [4]string{method, fingerprintPath(escapedPath), rawQuery, kindForm}), nil
		}
	}
	if isJSON(contentType) {
		ignore := ignore.json
		c, charged, ok, err := canonjson.AppendCharged(st.canon[:0], body, ignore, charge)
		if held != nil {
			defer held.Uncharge(charged)
		}
		if err != nil {
			return keystore.Fingerprint{}, err
		}
		if ok {
			kind, payload = kindJSON, c
			defer st.keepCanon(c)
		}
	}
	return st.sum(pre, [4]string{method, fingerprintPath(escapedPath), rawQuery, kind}, payload), nil
}

// fingerprintGraphQL is [fingerprint] for a keyed request on a GraphQL
// route: kind graphql, and in place of the body the operation name, the
// normalized document, the canonical variables and the persisted-query
// hash ([gql.Request.AppendFingerprintV2]); no other member of the request
// object. The route's fingerprint_ignore pointers were applied to the
// request object before req was parsed.
func fingerprintGraphQL(v keystore.FingerprintVersion, method, escapedPath, rawQuery string, req *gql.Request) keystore.Fingerprint {
	st := fingerprintPool.Get().(*fingerprintState)
	defer fingerprintPool.Put(st)
	payload := req.AppendFingerprintV2(st.canon[:0])
	defer st.keepCanon(payload)
	return st.sum(versionByte(v), [4]string{method, fingerprintPath(escapedPath), rawQuery, kindGraphQL}, payload)
}

// fingerprintPath is the path a fingerprint hashes.
func fingerprintPath(escapedPath string) string {
	if p, err := pathtmpl.NormalizeRFC3986(escapedPath); err == nil {
		return p
	}
	// Not reached for keyed requests: route matching refused the path.
	return escapedPath
}

// fingerprintV1 is the first release's fingerprint ([keystore.FingerprintV1]),
// kept byte for byte so that its records are compared in it: route name,
// method, the escaped path as sent, the raw query and the body as sent
// (never decoded) — canonical JSON (without the ignore pointers) when
// contentType is JSON and the body parses, else the raw bytes — each part
// length-prefixed, with no version byte and no kind.
func fingerprintV1(routeName, method, escapedPath, rawQuery, contentType string, body []byte, ignore []canonjson.Pointer) keystore.Fingerprint {
	st := fingerprintPool.Get().(*fingerprintState)
	defer fingerprintPool.Put(st)
	payload := body
	if isJSON(contentType) {
		if c, ok := canonjson.Append(st.canon[:0], body, ignore); ok {
			payload = c
			defer st.keepCanon(c)
		}
	}
	return st.sum("", [4]string{routeName, method, escapedPath, rawQuery}, payload)
}

// fingerprintInput is what a keyed request's fingerprint hashes of its
// body, decided by the key check: the body after its Content-Encoding was
// undone, and the Content-Type that says how to read it ("" when the
// encoding is one idemgate does not decode: the bytes are then hashed raw).
type fingerprintInput struct {
	body        []byte
	contentType string
}

// decodeBody decides the fingerprint input of a keyed request whose body
// was read whole: a body with Content-Encoding gzip or deflate is decoded,
// within max_body_bytes after decoding (over: 413 request_too_large; a
// corrupt encoding: 400 request_body_invalid), so that two compressions of
// one body are one request; other encodings are hashed raw.
func (p *Proxy) decodeBody(r *http.Request, body []byte) (fingerprintInput, *proxyProblem) {
	in := fingerprintInput{body: body, contentType: headerValue(r.Header, "Content-Type")}
	enc := r.Header["Content-Encoding"]
	if len(enc) == 0 {
		return in, nil
	}
	// The bound is max_body_bytes, as DESIGN.md's Bounds says; the body
	// itself is already held.
	held := exchangeOf(r).held // charged to max_buffered_bytes (body.go)
	if held == nil {
		b := budget.New(math.MaxInt64, math.MaxInt64)
		var err error
		if held, err = b.Read(limiter.Key{}, bytes.NewReader(body), int64(len(body)), &budget.ReadOptions{}); err != nil {
			return in, &problemBodyInvalid
		}
	}
	dec, err := held.Decode(strings.Join(enc, ","), exchangeOf(r).route.maxBody)
	switch {
	case err == nil:
		in.body = dec
	case errors.Is(err, budget.ErrUnsupportedEncoding):
		in.contentType = "" // hashed raw
	case errors.Is(err, budget.ErrTooLarge):
		return in, &problemRequestTooLarge
	case errors.Is(err, budget.ErrOverloaded):
		return in, &problemOverloaded
	default:
		return in, &problemBodyInvalid
	}
	return in, nil
}

// requestFingerprint returns the fingerprint of r, a keyed request, in version v,
// and false when this build cannot compute v (a newer release's).
// It fails only when the canonical JSON's memory is over max_buffered_bytes.
func (p *Proxy) requestFingerprint(r *http.Request, ex *exchange, v keystore.FingerprintVersion) (keystore.Fingerprint, bool, error) {
	rt := ex.route
	switch v {
	case currentFingerprint, fingerprintV2:
		if ex.gql != nil {
			return fingerprintGraphQL(v, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, ex.gql), true, nil
		}
		fp, err := fingerprintHeld(v, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, ex.fp.contentType, ex.fp.body, fingerprintIgnore{rt.ignore, rt.formIgnore}, ex.held)
		return fp, err == nil, err
	case keystore.FingerprintV1:
		// As the first release computed it: the body as sent; a GraphQL
		// mutation by its parsed request, all members included.
		ct := headerValue(r.Header, "Content-Type")
		if rt.Protocol == ProtocolGraphQL && !rt.Observe {
			if req, err := gql.ParseRequest(ct, ex.body); err == nil {
				return fingerprintV1(rt.Name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, "", graphqlFingerprintBody(&req), nil), true, nil
			}
		}
		return fingerprintV1(rt.Name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, ct, ex.body, rt.ignore), true, nil
	}
	return keystore.Fingerprint{}, false, nil
}

// reserve claims sk for r with the options o, its fingerprint filled in
// here (DESIGN.md, Upgrades): in [currentFingerprint] first, and when the key's
// record was written in another version this build knows, once more in
// the record's version — only a mismatch in the record's own version is a
// reused key. A record of a version this build does not know stays a
// mismatch.
func (p *Proxy) reserve(ctx context.Context, r *http.Request, ex *exchange, sk keystore.Key, o keystore.ReserveOptions) (keystore.Reservation, error) {
	var err error
	if o.Fingerprint, _, err = p.requestFingerprint(r, ex, currentFingerprint); err != nil {
		return keystore.Reservation{}, err // budget.ErrOverloaded
	}
	o.FingerprintVersion = currentFingerprint
	res, err := p.deps.Store.Reserve(ctx, sk, o)
	if err == nil {
		return res, nil // before errors.As, whose target escapes: an allocation
	}
	var me *keystore.MismatchError
	if errors.As(err, &me) && me.Version.Normalize() != currentFingerprint {
		if fp, ok, _ := p.requestFingerprint(r, ex, me.Version.Normalize()); ok {
			o.Fingerprint, o.FingerprintVersion = fp, me.Version.Normalize()
			res, err = p.deps.Store.Reserve(ctx, sk, o)
		}
	}
	return res, err
}

// isJSON reports whether a Content-Type is application/json or *+json.
func isJSON(contentType string) bool {
	if contentType == "" {
		return false
	}
	if contentType == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || (strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
