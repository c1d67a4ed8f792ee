package gql

import "encoding/binary"

// The forms of a request's normalized document, the first byte after the
// fingerprint's version, so that no two forms share an encoding.
const (
	formOperation byte = 'o' // the selected operation and the fragments it uses
	formDocument  byte = 'd' // the whole document: no operation is selected
	formRaw       byte = 'r' // the query as sent: it does not parse, or is ""
)

// fingerprintVersion starts every fingerprint, so that a future change of
// the encoding cannot collide with stored fingerprints.
const fingerprintVersion = "gql1"

// AppendFingerprint appends to dst the bytes that stand for the request's
// body in the route's fingerprint (DESIGN.md, "Fingerprint"), and returns
// the extended slice. The proxy hashes them in place of the raw body.
//
// They hold, each length-prefixed so that no two requests share an
// encoding: the form of the document (normalized operation, normalized
// whole document, or raw text), the operationName as sent ("" for absent or
// null), the document (see [AppendNormalized]; the query as sent when it
// does not parse), the canonical variables (absent, null and {} alike), the
// persisted-query hash, and the canonical JSON of the body's other members
// (extensions included). Two requests have equal fingerprints exactly when
// these parts are equal.
//
// AppendFingerprint allocates nothing beyond the growth of dst.
func (r Request) AppendFingerprint(dst []byte) []byte {
	return appendPart(r.appendParts(dst, fingerprintVersion), r.rest)
}

// appendParts appends version and the parts both fingerprint versions
// hold: the form, the operationName, the document, the variables and the
// persisted-query hash.
func (r Request) appendParts(dst []byte, version string) []byte {
	dst = append(dst, version...)
	form := r.form
	if form == 0 {
		form = formRaw // the zero Request
	}
	dst = append(dst, form)
	dst = appendPart(dst, r.operationName)
	if form == formRaw {
		dst = appendPart(dst, r.query)
	} else {
		dst = appendPart(dst, r.normalized)
	}
	dst = appendPart(dst, r.variables)
	return appendPart(dst, r.hash)
}

// Fingerprint returns AppendFingerprint(nil).
func (r Request) Fingerprint() []byte { return r.AppendFingerprint(nil) }

func appendPart[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// fingerprintVersion2 starts every [Request.AppendFingerprintV2].
const fingerprintVersion2 = "gql2"

// AppendFingerprintV2 appends to dst what stands for the request's body in
// the proxy's second fingerprint version (DESIGN.md, "Fingerprint"): the
// form of the document, the operationName, the document (normalized, or as
// sent when it does not parse), the canonical variables and the
// persisted-query hash, each length-prefixed. Unlike [Request.AppendFingerprint]
// it leaves out every other member, extensions included: tracing
// extensions change per attempt. Members the route ignores are removed from
// the body before it is parsed.
func (r Request) AppendFingerprintV2(dst []byte) []byte {
	return r.appendParts(dst, fingerprintVersion2)
}
