package keystore

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"
)

// EncodeResponse and DecodeResponse are the compact binary form of a
// [Response] that backends store (the Redis store's "ans" field, the memory
// store's records):
//
//	version   byte   answerVersion
//	flags     byte   flagTooLarge | flagHeader | flagBody | flagCompressed
//	status    varint
//	names     uvarint, then per name (sorted):
//	            uvarint len, name bytes, uvarint count, per value: uvarint len, value bytes
//	body      the remaining bytes
//
// flagHeader and flagBody keep a nil Header or Body apart from an empty one.
// flagCompressed ([Response.Compressed], always with flagBody) is unknown to
// the releases before it, whose decoders refuse unknown flags: they read a
// compressed answer as malformed (503), never as a body.
const (
	answerVersion = 1

	flagTooLarge   = 1 << 0
	flagHeader     = 1 << 1
	flagBody       = 1 << 2
	flagCompressed = 1 << 3
)

// ErrMalformedResponse is returned by [DecodeResponse] for bytes that are
// not an encoded Response.
var ErrMalformedResponse = errors.New("keystore: malformed stored answer")

// EncodeResponse encodes r in the format above. A nil r encodes as the zero
// Response.
func EncodeResponse(r *Response) []byte {
	return AppendResponse(make([]byte, 0, EncodedSizeBound(r)), r)
}

// EncodedSizeBound is at least the length of r's encoding.
func EncodedSizeBound(r *Response) int {
	if r == nil {
		return 2 + binary.MaxVarintLen64*2
	}
	n := 2 + binary.MaxVarintLen64*2 + len(r.Body)
	for k, vs := range r.Header {
		n += len(k) + 2*binary.MaxVarintLen32
		for _, v := range vs {
			n += len(v) + binary.MaxVarintLen32
		}
	}
	return n
}

// AppendResponse appends r's encoding (see [EncodeResponse]) to b: a
// caller with a buffer of its own encodes without allocating (up to 16
// header names; more are sorted in a slice of their own).
func AppendResponse(b []byte, r *Response) []byte {
	if r == nil {
		r = &Response{}
	}
	if need := EncodedSizeBound(r); cap(b)-len(b) < need {
		b = slices.Grow(b, need)
	}
	var flags byte
	if r.TooLarge {
		flags |= flagTooLarge
	}
	if r.Header != nil {
		flags |= flagHeader
	}
	if r.Body != nil {
		flags |= flagBody
	}
	if r.Compressed {
		flags |= flagCompressed | flagBody
	}
	b = append(b, answerVersion, flags)
	b = binary.AppendVarint(b, int64(r.Status))
	var arr [16]string
	names := arr[:0]
	for k := range r.Header {
		names = append(names, k)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		vs := r.Header[k]
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = appendString(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// DecodeResponse decodes what EncodeResponse made. The Response's Body
// shares b's memory, so b must not change afterwards. It never panics: any
// malformed input returns ErrMalformedResponse.
func DecodeResponse(b []byte) (*Response, error) {
	d := decoder{b: b}
	if d.byte() != answerVersion {
		return nil, ErrMalformedResponse
	}
	flags := d.byte()
	if flags&^(flagTooLarge|flagHeader|flagBody|flagCompressed) != 0 ||
		flags&(flagCompressed|flagBody) == flagCompressed {
		return nil, ErrMalformedResponse
	}
	r := &Response{TooLarge: flags&flagTooLarge != 0, Compressed: flags&flagCompressed != 0}
	status := d.varint()
	if status < 0 || status > 999 {
		return nil, ErrMalformedResponse
	}
	r.Status = int(status)
	names := d.count()
	if flags&flagHeader != 0 {
		r.Header = make(http.Header, names)
	} else if names != 0 {
		return nil, ErrMalformedResponse
	}
	for range names {
		k := d.string()
		nv := d.count()
		if d.err {
			break
		}
		vs := make([]string, nv)
		for i := range vs {
			vs[i] = d.string()
		}
		r.Header[k] = vs
	}
	if d.err {
		return nil, ErrMalformedResponse
	}
	if flags&flagBody != 0 {
		r.Body = d.b[:len(d.b):len(d.b)]
	} else if len(d.b) != 0 {
		return nil, ErrMalformedResponse
	}
	return r, nil
}

// decoder reads from b; after the first error it returns zero values and
// sets err.
type decoder struct {
	b   []byte
	err bool
}

func (d *decoder) byte() byte {
	if d.err || len(d.b) == 0 {
		d.err = true
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) varint() int64 {
	if d.err {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a uvarint that counts items of at least one byte each, so it
// is never more than the bytes left: corrupt input cannot make us allocate.
func (d *decoder) count() int {
	if d.err {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > uint64(len(d.b)-n) {
		d.err = true
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

func (d *decoder) string() string {
	l := d.count()
	if d.err {
		return ""
	}
	s := string(d.b[:l])
	d.b = d.b[l:]
	return s
}
