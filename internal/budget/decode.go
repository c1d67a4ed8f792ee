package budget

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"strings"
)

// decoderBytes is charged while a decompressor runs: flate's window and
// Huffman tables plus gzip's or zlib's state (measured about 43 KiB with
// go1.26; rounded up).
const decoderBytes = 64 << 10

// Decode returns b's bytes decoded as the Content-Encoding header value enc
// says (r.Header.Get("Content-Encoding"); several codings are undone from
// the last to the first, as RFC 9110 §8.4 lists them in the order applied),
// for fingerprinting. It reads at most limit decoded bytes (max_body_bytes;
// <= 0 means no limit but the budget) and charges the decoded buffer, which
// grows as it fills, to b's hold: [Body.Free] gives it back.
//
// "" and "identity" return b.Bytes() itself. gzip (and x-gzip) and deflate
// (zlib-wrapped, as RFC 9110 says, or raw, as some clients send it) are
// decoded; any other coding returns [ErrUnsupportedEncoding]. A decoded body
// over limit returns [ErrTooLarge]; corrupt data, a bad checksum, a
// truncated stream or trailing garbage return an error wrapping
// [ErrInvalid]; a refused charge returns [ErrOverloaded]. On error the
// decoded buffers stay charged until Free.
//
// At most maxCodings codings are undone: a value listing more (other than
// "identity") returns [ErrTooManyCodings], which wraps [ErrInvalid], before
// anything is decoded, so a bomb of nested layers costs nothing (DESIGN.md,
// Hardening).
func (b *Body) Decode(enc string, limit int64) ([]byte, error) {
	if limit <= 0 {
		limit = 1<<63 - 1
	}
	if n := countCodings(enc); n > maxCodings {
		return nil, fmt.Errorf("%w: %d content codings", ErrTooManyCodings, n)
	}
	cur := b.buf
	for enc != "" {
		var coding string
		if i := strings.LastIndexByte(enc, ','); i >= 0 {
			coding, enc = enc[i+1:], enc[:i]
		} else {
			coding, enc = enc, ""
		}
		coding = strings.ToLower(strings.Trim(coding, " \t"))
		switch coding {
		case "", "identity":
			continue
		case "gzip", "x-gzip", "deflate":
		default:
			return nil, fmt.Errorf("%w: %q", ErrUnsupportedEncoding, coding)
		}
		out, err := b.decode(coding, cur, limit)
		if err != nil {
			return nil, err
		}
		cur = out
	}
	if int64(len(cur)) > limit {
		return nil, ErrTooLarge
	}
	return cur, nil
}

// maxCodings is the most content codings [Body.Decode] undoes: two
// (gzip, gzip) covers a client that compresses what a library already
// compressed; no client nests more.
const maxCodings = 2

// ErrTooManyCodings: a Content-Encoding lists more than maxCodings
// codings. It wraps [ErrInvalid] (400 request_body_invalid).
var ErrTooManyCodings = fmt.Errorf("%w: more than %d content codings", ErrInvalid, maxCodings)

// countCodings counts the codings of enc that are not "identity" (or
// empty list elements). It allocates nothing.
func countCodings(enc string) int {
	n := 0
	for enc != "" {
		var coding string
		coding, enc, _ = strings.Cut(enc, ",")
		coding = strings.Trim(coding, " \t")
		if coding != "" && !strings.EqualFold(coding, "identity") {
			n++
		}
	}
	return n
}

// decode undoes one coding of src into a new buffer charged to b.
func (b *Body) decode(coding string, src []byte, limit int64) ([]byte, error) {
	if err := b.Charge(decoderBytes); err != nil {
		return nil, err
	}
	defer func() {
		b.budget.Refund(b.key, decoderBytes)
		b.held -= decoderBytes
	}()
	var dec io.Reader
	switch coding {
	case "deflate":
		zr, err := zlib.NewReader(bytes.NewReader(src))
		switch {
		case err == nil:
			defer zr.Close()
			dec = zr
		case errors.Is(err, zlib.ErrHeader):
			dec = flate.NewReader(bytes.NewReader(src))
		default:
			return nil, fmt.Errorf("%w: deflate: %w", ErrInvalid, err)
		}
	default:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %w", ErrInvalid, err)
		}
		dec = zr
	}
	// Decoded data has no announced length: start small, as a chunked
	// body does, so a lying small bomb cannot make a big first buffer.
	out := &Body{budget: b.budget, key: b.key}
	err := out.fill(dec, eagerBytes, -1, limit, &ReadOptions{})
	b.held += out.held
	if err != nil {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrOverloaded) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", coding, err)
	}
	return out.buf, nil
}
