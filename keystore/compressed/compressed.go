// Package compressed compresses the answers a [keystore.Store] keeps
// (store.compression: zstd, DESIGN.md revision 3), so that a JSON answer
// takes a fraction of its size in Redis or in the memory store.
//
// [New] wraps any store, above the sealed one when answers are encrypted
// (compressed bytes are compressible; sealed ones are not). When
// compression is on, an answer whose body has at least [MinSize] bytes is
// stored with its body as one zstd frame and [keystore.Response.Compressed]
// set; the status and the headers stay as they are. A body that does not
// shrink, or that is longer than MaxBodyBytes, is stored as it came. The
// stores keep the mark with the record (keystore's codec, and the sealed
// plaintext, carry it as a flag the releases before it refuse), so a
// release without compression reads a compressed record as damaged (503),
// never as a body: enable compression once every replica runs a release
// that has it.
//
// Reading does not depend on the setting: a Store with compression off
// still opens compressed answers, and one with it on replays the answers
// stored without it, so replicas with either setting share one store, and
// [Store.Set] switches it live. A compressed body is opened only when its
// frame declares its size and that size is at most MaxBodyBytes
// (idempotency.max_response_bytes): the body is decoded into a buffer of
// that size (and 16 bytes) and no further, so a frame that lies (a
// decompression bomb) costs at most MaxBodyBytes. A frame that does not open (altered,
// truncated, over the bound, a failed checksum) returns an error wrapping
// [keystore.ErrMalformedResponse], and the proxy fails closed on it.
//
// One zstd encoder and one decoder serve every Store of the process; both
// run up to GOMAXPROCS calls at once (EncodeAll, DecodeAll) and reuse their
// state between calls.
package compressed

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/idemgate/idemgate/keystore"
)

// MinSize is the smallest body that is compressed: below it, zstd's frame
// (about a dozen bytes) and the work of opening it on every replay buy
// little.
const MinSize = 512

// decodeSlack is what zstd's fast decoding path needs beyond the output's
// end (the library's compressedBlockOverAlloc).
const decodeSlack = 16

// DefaultMaxBodyBytes is MaxBodyBytes when Options leaves it zero: the
// default of idempotency.max_response_bytes.
const DefaultMaxBodyBytes = 64 << 10

// Options says what a [Store] writes and what it opens.
type Options struct {
	// Compress makes the Store compress the bodies it stores (those of
	// MinSize bytes or more that shrink). Off, answers are stored as they
	// come; compressed ones are read either way.
	Compress bool
	// MaxBodyBytes bounds a body the Store compresses and one it opens:
	// idempotency.max_response_bytes. Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// OpenCacheBytes bounds the bodies of the frames the Store opened
	// last that it keeps, so that the replays of one answer decode it
	// once (frames and bodies counted; the oldest go first). Zero keeps
	// none: what a replay cache above the Store does already.
	OpenCacheBytes int64
}

func (o Options) normalize() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return o
}

// Store wraps a [keystore.Store], compressing the answers it stores. It is
// safe for concurrent use. It implements [keystore.Admin] and
// [keystore.UnknownStore]; those methods return an error wrapping
// [errors.ErrUnsupported] when the inner store does not. It declares every
// method that carries an answer or an info; the others pass through
// ([keystore.Wrapper]).
type Store struct {
	keystore.Wrapper
	opts  atomic.Pointer[Options]
	cache frameCache // Options.OpenCacheBytes
}

var (
	_ keystore.UnknownStore = (*Store)(nil)
	_ keystore.Admin        = (*Store)(nil)
)

// New returns a Store over inner with opts. Close closes inner.
func New(inner keystore.Store, opts Options) (*Store, error) {
	if inner == nil {
		return nil, errors.New("compressed: nil inner store")
	}
	if _, err := codec(); err != nil {
		return nil, err
	}
	s := &Store{Wrapper: keystore.Wrap(inner)}
	s.Set(opts)
	return s, nil
}

// Set replaces the Store's options from its next call on (a config
// reload); calls already running finish with the old ones.
func (s *Store) Set(opts Options) {
	o := opts.normalize()
	s.opts.Store(&o)
	s.cache.trim(max(o.OpenCacheBytes, 0)) // a lower bound frees at once
}

// Options returns the options the Store runs with.
func (s *Store) Options() Options { return *s.opts.Load() }

// zstdCodec is the process's encoder and decoder.
type zstdCodec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

// codec builds the encoder and decoder once. Neither starts a goroutine
// for EncodeAll and DecodeAll, so neither is ever closed.
var codec = sync.OnceValues(func() (*zstdCodec, error) {
	enc, err := zstd.NewWriter(nil,
		// The default level, not the fastest: on the corpus the fastest
		// takes about a third less CPU, but its Stripe charge takes 52 % of
		// its uncompressed Redis memory (46 % at the default; BENCHMARKS.md).
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(0), // GOMAXPROCS
	)
	if err != nil {
		return nil, fmt.Errorf("compressed: zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		zstd.WithDecoderConcurrency(0), // GOMAXPROCS
		// Never decode past cap(dst), which open sets to the size the frame
		// declares, checked against MaxBodyBytes first.
		zstd.WithDecodeAllCapLimit(true),
	)
	if err != nil {
		return nil, fmt.Errorf("compressed: zstd decoder: %w", err)
	}
	return &zstdCodec{enc: enc, dec: dec}, nil
})

// compress returns the Response the inner store keeps for resp under o:
// resp itself unless its body is compressed.
func compress(resp *keystore.Response, o Options) *keystore.Response {
	if !o.Compress || resp == nil || resp.Compressed || len(resp.Body) < MinSize || int64(len(resp.Body)) > o.MaxBodyBytes {
		return resp
	}
	c, _ := codec() // New checked it
	// JSON shrinks to half or less (a quarter to two fifths in the
	// corpus): start there, EncodeAll grows dst if it must.
	frame := c.enc.EncodeAll(resp.Body, make([]byte, 0, len(resp.Body)/2+64))
	if len(frame) >= len(resp.Body) {
		return resp // incompressible (an image, a gzip body): as it came
	}
	return &keystore.Response{Status: resp.Status, Header: resp.Header, Body: frame, TooLarge: resp.TooLarge, Compressed: true}
}

// open returns the answer stored resp holds: resp itself unless its body
// is compressed. maxBody bounds the opened body. With cache, a frame it
// holds is not decoded again (after the same checks), and one decoded is
// kept in it within cacheMax bytes.
func open(resp *keystore.Response, maxBody int64, cache *frameCache, cacheMax int64) (*keystore.Response, error) {
	if resp == nil || !resp.Compressed {
		return resp, nil
	}
	var h zstd.Header
	if err := h.Decode(resp.Body); err != nil {
		return nil, fmt.Errorf("%w: compressed body: %v", keystore.ErrMalformedResponse, err)
	}
	switch {
	case h.Skippable || h.DictionaryID != 0:
		return nil, fmt.Errorf("%w: compressed body: not a plain zstd frame", keystore.ErrMalformedResponse)
	case !h.HasFCS:
		return nil, fmt.Errorf("%w: compressed body: the frame does not declare its size", keystore.ErrMalformedResponse)
	case h.FrameContentSize > uint64(maxBody):
		return nil, fmt.Errorf("%w: compressed body: the frame declares %d bytes, over the %d the store opens (idempotency.max_response_bytes)",
			keystore.ErrMalformedResponse, h.FrameContentSize, maxBody)
	}
	if cache != nil {
		if body, ok := cache.get(resp.Body); ok {
			return &keystore.Response{Status: resp.Status, Header: resp.Header, Body: body, TooLarge: resp.TooLarge}, nil
		}
	}
	c, _ := codec() // New checked it
	// 16 bytes beyond the declared size let the decoder take its fast
	// path (it may write that far past the end while it works); it still
	// stops at the declared size, and at the buffer's end in any case.
	body, err := c.dec.DecodeAll(resp.Body, make([]byte, 0, int(h.FrameContentSize)+decodeSlack))
	if err != nil {
		return nil, fmt.Errorf("%w: compressed body: %v", keystore.ErrMalformedResponse, err)
	}
	if uint64(len(body)) != h.FrameContentSize {
		return nil, fmt.Errorf("%w: compressed body: %d bytes, the frame declares %d", keystore.ErrMalformedResponse, len(body), h.FrameContentSize)
	}
	if cache != nil {
		cache.put(resp.Body, body, cacheMax)
	}
	return &keystore.Response{Status: resp.Status, Header: resp.Header, Body: body, TooLarge: resp.TooLarge}, nil
}

// open opens resp under the Store's options, through its cache.
func (s *Store) open(resp *keystore.Response) (*keystore.Response, error) {
	o := s.opts.Load()
	if o.OpenCacheBytes <= 0 {
		return open(resp, o.MaxBodyBytes, nil, 0)
	}
	return open(resp, o.MaxBodyBytes, &s.cache, o.OpenCacheBytes)
}

// OpenCacheStats is what a Store's cache of opened answers holds
// (Options.OpenCacheBytes), and how many opens it answered.
type OpenCacheStats struct {
	Entries int
	Bytes   int64
	Hits    uint64
}

// OpenCacheStats returns the Store's [OpenCacheStats].
func (s *Store) OpenCacheStats() OpenCacheStats {
	n, b, h := s.cache.stats()
	return OpenCacheStats{Entries: n, Bytes: b, Hits: h}
}

// opened returns rec with its answer opened.
func (s *Store) opened(rec keystore.Record) (keystore.Record, error) {
	resp, err := s.open(rec.Response)
	if err != nil {
		return keystore.Record{}, err
	}
	rec.Response = resp
	return rec, nil
}

// Reserve implements [keystore.Store]. A replay whose answer does not open
// returns an error wrapping keystore.ErrMalformedResponse.
func (s *Store) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	res, err := s.Wrapper.Reserve(ctx, k, opts)
	if err != nil || res.Response == nil {
		return res, err
	}
	if res.Response, err = s.open(res.Response); err != nil {
		return keystore.Reservation{}, err
	}
	return res, nil
}

// Complete implements [keystore.Store].
func (s *Store) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Wrapper.Complete(ctx, k, token, compress(resp, *s.opts.Load()))
}

// CompleteClaim implements [keystore.Store]; resp is compressed like
// Complete's.
func (s *Store) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return s.Wrapper.CompleteClaim(ctx, k, c, compress(resp, *s.opts.Load()))
}

// Get implements [keystore.Store]. A completed record whose answer does not
// open returns an error wrapping keystore.ErrMalformedResponse.
func (s *Store) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	rec, err := s.Wrapper.Get(ctx, k)
	if err != nil {
		return rec, err
	}
	return s.opened(rec)
}

// InFlight implements [keystore.Admin].
func (s *Store) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	recs, err := s.Wrapper.InFlight(ctx, olderThan, limit)
	return keystore.MapListing(recs, err, s.opened)
}

// ForceComplete implements [keystore.Admin]; resp is compressed like
// Complete's.
func (s *Store) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.Wrapper.ForceComplete(ctx, k, compress(resp, *s.opts.Load()))
}

// MarkSent implements [keystore.UnknownStore]; info is small and stored
// as it is.
func (s *Store) MarkSent(ctx context.Context, k keystore.Key, token uint64, info *keystore.Response) error {
	return s.Wrapper.MarkSent(ctx, k, token, info)
}

// Resolve implements [keystore.UnknownStore]; resp is compressed like
// Complete's.
func (s *Store) Resolve(ctx context.Context, k keystore.Key, id keystore.ClaimID, resp *keystore.Response) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if resp != nil {
		resp = compress(resp, *s.opts.Load())
	}
	return s.Wrapper.Resolve(ctx, k, id, resp)
}

// Unknown implements [keystore.UnknownStore]. Unknown records hold no
// answer, so nothing is opened.
func (s *Store) Unknown(ctx context.Context, limit int) ([]keystore.Record, error) {
	return s.Wrapper.Unknown(ctx, limit)
}
