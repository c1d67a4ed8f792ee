package compressed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/keystore/sealed"
	"github.com/idemgate/idemgate/keystore/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// corpus is testdata/corpus: real-looking JSON API answers of 3.4 to 4.6
// KB (a Stripe charge, customer and refund list, pretty-printed as Stripe
// sends them; an order with line items and a UCP checkout session).
type answer struct {
	name string
	body []byte
}

func corpus(t testing.TB) []answer {
	t.Helper()
	files, err := filepath.Glob("testdata/corpus/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("corpus: %v (%d files)", err, len(files))
	}
	var out []answer
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, answer{strings.TrimSuffix(filepath.Base(f), ".json"), b})
	}
	return out
}

// jsonAnswer is body as an upstream answers it, with typical headers.
func jsonAnswer(body []byte) *keystore.Response {
	return &keystore.Response{
		Status: 201,
		Header: http.Header{
			"Content-Type":   {"application/json"},
			"Request-Id":     {"req_8Jt3kQ1mZ0aPx2"},
			"Stripe-Version": {"2026-11-17"},
			"Cache-Control":  {"no-cache, no-store"},
		},
		Body: body,
	}
}

func newMem(t testing.TB) (*memstore.Store, *testutil.Clock) {
	clk := testutil.NewClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	m := memstore.New(memstore.Options{Now: clk.Now})
	t.Cleanup(func() { m.Close() })
	return m, clk
}

func mustNew(t testing.TB, inner keystore.Store, o Options) *Store {
	t.Helper()
	s, err := New(inner, o)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	return s
}

func sealKey(t testing.TB) sealed.Key {
	var b [32]byte
	rand.Read(b[:])
	k, err := sealed.ParseKey(base64.StdEncoding.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var on = Options{Compress: true}

// The conformance suite, compression on, over the memory store and over
// the sealed memory store (compressed before sealing); the Redis store's
// tests run it over Redis (redisstore's compressed_test.go). The suite's
// sample answer has a 512-byte body, so its answers are stored compressed.
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
			m, clk := newMem(t)
			return mustNew(t, m, on), clk.Advance
		})
	})
	t.Run("memory_sealed", func(t *testing.T) {
		t.Parallel()
		storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
			m, clk := newMem(t)
			s, err := sealed.New(m, sealKey(t))
			if err != nil {
				t.Fatal(err)
			}
			return mustNew(t, s, on), clk.Advance
		})
	})
}

// newRedis returns a client of the standalone test server, or skips.
func newRedis(t testing.TB) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{redistest.Addr(t)}, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("NewClient = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A compressed answer, replayed by Reserve and read by Get, is the answer
// byte for byte; what the inner store holds is a zstd frame of the body
// with the headers in clear, and far smaller.
func TestCorpusRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _ := newMem(t)
	s := mustNew(t, m, on)
	for _, a := range corpus(t) {
		want := jsonAnswer(a.body)
		k := keystore.NewKey(a.name)
		complete(t, s, k, want)
		res, err := s.Reserve(ctx, k, reserveOpts())
		if err != nil || !reflect.DeepEqual(res.Response, want) {
			t.Errorf("%s: replay = %v; want the answer byte for byte", a.name, err)
		}
		rec, err := s.Get(ctx, k)
		if err != nil || !reflect.DeepEqual(rec.Response, want) {
			t.Errorf("%s: Get = %v; want the answer byte for byte", a.name, err)
		}
		raw := rawAnswer(t, m, k)
		if !raw.Compressed || !reflect.DeepEqual(raw.Header, want.Header) || raw.Status != want.Status {
			t.Errorf("%s: stored %+v; want the body compressed, status and headers as they are", a.name, raw)
		}
		if 2*len(raw.Body) > len(a.body) {
			t.Errorf("%s: compressed body %d bytes of %d; want at most half", a.name, len(raw.Body), len(a.body))
		}
	}
}

func reserveOpts() keystore.ReserveOptions {
	return keystore.ReserveOptions{Fingerprint: keystore.Fingerprint(keystore.NewKey("fp")), Route: "r", Lease: time.Minute, Retention: time.Hour}
}

// complete claims k in s and stores resp as its answer.
func complete(t testing.TB, s keystore.Store, k keystore.Key, resp *keystore.Response) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Reserve(ctx, k, reserveOpts())
	if err != nil || res.Token == 0 {
		t.Fatalf("Reserve = %+v, %v; want a claim", res, err)
	}
	if err := s.Complete(ctx, k, res.Token, resp); err != nil {
		t.Fatalf("Complete = %v", err)
	}
}

// rawAnswer is what inner holds for k, as the backend decodes it.
func rawAnswer(t testing.TB, inner keystore.Store, k keystore.Key) *keystore.Response {
	t.Helper()
	rec, err := inner.Get(context.Background(), k)
	if err != nil || rec.Response == nil {
		t.Fatalf("inner Get = %+v, %v", rec, err)
	}
	return rec.Response
}

// What is compressed: bodies of MinSize bytes or more that shrink and fit
// MaxBodyBytes, with compression on. Everything else is stored as it came.
func TestWhatIsCompressed(t *testing.T) {
	t.Parallel()
	json := bytes.Repeat([]byte(`{"id":"ch_1","object":"charge"},`), 64)
	random := make([]byte, 4096)
	rand.Read(random)
	for _, tc := range []struct {
		name string
		o    Options
		resp *keystore.Response
		want bool
	}{
		{"json", on, jsonAnswer(json), true},
		{"exactly MinSize", on, jsonAnswer(json[:MinSize]), true},
		{"below MinSize", on, jsonAnswer(json[:MinSize-1]), false},
		{"incompressible", on, jsonAnswer(random), false},
		{"over MaxBodyBytes", Options{Compress: true, MaxBodyBytes: 1024}, jsonAnswer(json), false},
		{"compression off", Options{}, jsonAnswer(json), false},
		{"too large", on, &keystore.Response{Status: 200, TooLarge: true}, false},
		{"no body", on, &keystore.Response{Status: 204, Header: http.Header{"A": {strings.Repeat("b", 1000)}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newMem(t)
			s := mustNew(t, m, tc.o)
			k := keystore.NewKey(tc.name)
			complete(t, s, k, tc.resp)
			if got := rawAnswer(t, m, k).Compressed; got != tc.want {
				t.Errorf("stored compressed = %v; want %v", got, tc.want)
			}
			rec, err := s.Get(context.Background(), k)
			if err != nil || !reflect.DeepEqual(rec.Response, tc.resp) {
				t.Errorf("Get = %v; want the answer as it was stored", err)
			}
		})
	}
}

// Replicas with compression on and off share one store: each replays what
// the other wrote, in every combination, on the memory store (two wrappers
// over one store) and on a real Redis (two clients, two stores, one
// prefix), sealed or not.
func TestMixedReplicas(t *testing.T) {
	t.Parallel()
	type pair struct{ a, b keystore.Store }
	backends := map[string]func(t *testing.T) pair{
		"memory": func(t *testing.T) pair {
			m, _ := newMem(t)
			return pair{m, m}
		},
		"memory_sealed": func(t *testing.T) pair {
			m, _ := newMem(t)
			key := sealKey(t)
			a, err := sealed.New(m, key)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := sealed.New(m, key)
			return pair{a, b}
		},
		"redis": func(t *testing.T) pair {
			prefix := redistest.Prefix(t)
			var p [2]keystore.Store
			for i := range p {
				r, err := redisstore.New(newRedis(t), redisstore.Options{KeyPrefix: prefix})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close() })
				p[i] = r
			}
			return pair{p[0], p[1]}
		},
	}
	body := corpus(t)[0].body
	for name, mk := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := mk(t)
			for _, wOn := range []bool{false, true} {
				for _, rOn := range []bool{false, true} {
					w := mustNew(t, p.a, Options{Compress: wOn})
					r := mustNew(t, p.b, Options{Compress: rOn})
					k := storetest.NewTestKey(t)
					want := jsonAnswer(body)
					complete(t, w, k, want)
					res, err := r.Reserve(context.Background(), k, reserveOpts())
					if err != nil || !reflect.DeepEqual(res.Response, want) {
						t.Errorf("written with compression %v, replayed with %v: %v; want the answer byte for byte", wOn, rOn, err)
					}
					if name != "memory_sealed" {
						if got := rawAnswer(t, p.b, k).Compressed; got != wOn {
							t.Errorf("written with compression %v: stored compressed = %v", wOn, got)
						}
					}
				}
			}
		})
	}
}

// Set switches what the store writes from its next call on; what was
// written before still replays.
func TestSetLive(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, m, Options{})
	body := corpus(t)[1].body
	for i, compress := range []bool{false, true, false, true} {
		s.Set(Options{Compress: compress})
		if got := s.Options(); got.Compress != compress || got.MaxBodyBytes != DefaultMaxBodyBytes {
			t.Fatalf("Options = %+v after Set(Compress: %v)", got, compress)
		}
		k := keystore.NewKey("set", string(rune('a'+i)))
		complete(t, s, k, jsonAnswer(body))
		if got := rawAnswer(t, m, k).Compressed; got != compress {
			t.Errorf("write %d: stored compressed = %v; want %v", i, got, compress)
		}
	}
	for i := range 4 {
		k := keystore.NewKey("set", string(rune('a'+i)))
		if rec, err := s.Get(context.Background(), k); err != nil || !bytes.Equal(rec.Response.Body, body) {
			t.Errorf("record %d: Get = %v; want the body", i, err)
		}
	}
}

// frame is body compressed as the store compresses it.
func frame(body []byte) []byte {
	c, _ := codec()
	return c.enc.EncodeAll(body, nil)
}

// withFCS returns f with its frame content size field rewritten to n (the
// field must be 4 bytes wide, as for a body of 64 KiB to 4 GiB, with no
// dictionary id).
func withFCS(t testing.TB, f []byte, n uint32) []byte {
	t.Helper()
	f = slices.Clone(f)
	desc := f[4]
	if desc>>6 != 2 || desc&3 != 0 {
		t.Fatalf("frame descriptor %#x: want a 4-byte content size and no dictionary", desc)
	}
	at := 5
	if desc&0x20 == 0 {
		at++ // a window descriptor comes first
	}
	binary.LittleEndian.PutUint32(f[at:at+4], n)
	return f
}

// rawFrame is a valid zstd frame holding body in one raw block, without a
// content size (body at most 1 KiB, the window it declares).
func rawFrame(body []byte) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00} // magic, no content size, 1 KiB window
	hdr := uint32(1 | len(body)<<3)                 // last block, raw
	f = append(f, byte(hdr), byte(hdr>>8), byte(hdr>>16))
	return append(f, body...)
}

// Damaged compressed answers read as malformed, never as a body: through
// Reserve and Get, on the memory store and under the sealed one. The bomb
// cases are refused before the body is decoded (a frame that declares more
// than MaxBodyBytes), or stopped at the size the frame declares (one that
// lies about it).
func TestDamaged(t *testing.T) {
	t.Parallel()
	body := corpus(t)[2].body
	good := frame(body)
	zeros := frame(make([]byte, 1<<20)) // 1 MiB of zeros: a few hundred bytes
	noFCS := rawFrame(body[:1000])
	plain, _ := zstd.NewReader(nil)
	defer plain.Close()
	if got, err := plain.DecodeAll(noFCS, nil); err != nil || !bytes.Equal(got, body[:1000]) {
		t.Fatalf("the frame without a content size does not decode: %v", err) // the case below would prove nothing
	}
	flipped := slices.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	skippable := append([]byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0}, "abcd"...)
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"empty", []byte{}},
		{"garbage", []byte("{\"not\":\"a zstd frame\"}")},
		{"truncated", good[:len(good)-7]},
		{"one byte flipped", flipped},
		{"checksum altered", append(slices.Clone(good[:len(good)-1]), good[len(good)-1]^1)},
		{"trailing garbage", append(slices.Clone(good), 1, 2, 3)},
		{"two frames", append(slices.Clone(good), good...)},
		{"no content size", noFCS},
		{"skippable frame", skippable},
		{"bomb: declares 1 MiB", zeros},
		{"bomb: declares 100 bytes, holds 1 MiB", withFCS(t, zeros, 100)},
		{"declares more than it holds", withFCS(t, zeros, 2<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newMem(t)
			s := mustNew(t, m, on)
			k := keystore.NewKey(tc.name)
			// The inner store takes the damaged record as it is.
			complete(t, m, k, &keystore.Response{Status: 200, Header: http.Header{}, Body: tc.body, Compressed: true})
			if res, err := s.Reserve(context.Background(), k, reserveOpts()); !errors.Is(err, keystore.ErrMalformedResponse) {
				t.Errorf("Reserve = (response %v), %v; want ErrMalformedResponse", res.Response != nil, err)
			}
			if rec, err := s.Get(context.Background(), k); !errors.Is(err, keystore.ErrMalformedResponse) {
				t.Errorf("Get = (response %v), %v; want ErrMalformedResponse", rec.Response != nil, err)
			}
		})
	}
}

// A decompression bomb in the store costs no memory to refuse: a frame of
// a few hundred bytes that holds 64 MiB allocates far less than its
// content, whether it declares its size or lies about it.
func TestBombAllocatesLittle(t *testing.T) {
	zeros := frame(make([]byte, 64<<20))
	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"declares 64 MiB", zeros},
		{"declares 1000 bytes", withFCS(t, zeros, 1000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := newMem(t)
			s := mustNew(t, m, on)
			k := keystore.NewKey(tc.name)
			complete(t, m, k, &keystore.Response{Status: 200, Body: tc.body, Compressed: true})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := s.Reserve(context.Background(), k, reserveOpts())
			runtime.ReadMemStats(&after)
			if !errors.Is(err, keystore.ErrMalformedResponse) {
				t.Errorf("Reserve = %v; want ErrMalformedResponse", err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
				t.Errorf("refusing the bomb allocated %d bytes; want under 1 MiB", got)
			}
		})
	}
}

// MaxBodyBytes bounds what opens: the reader's bound, not the writer's.
func TestMaxBodyBytesBoundsOpening(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	body := corpus(t)[3].body
	w := mustNew(t, m, on)
	k := keystore.NewKey("bound")
	complete(t, w, k, jsonAnswer(body))
	small := mustNew(t, m, Options{MaxBodyBytes: int64(len(body) - 1)})
	if _, err := small.Get(context.Background(), k); !errors.Is(err, keystore.ErrMalformedResponse) {
		t.Errorf("Get with MaxBodyBytes one byte short = %v; want ErrMalformedResponse", err)
	}
	exact := mustNew(t, m, Options{MaxBodyBytes: int64(len(body))})
	if rec, err := exact.Get(context.Background(), k); err != nil || !bytes.Equal(rec.Response.Body, body) {
		t.Errorf("Get with MaxBodyBytes = the body's size: %v; want the body", err)
	}
}

// The admin repairs and the claim operations compress like Complete, and
// a store without them says so.
func TestClaimAndAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _ := newMem(t)
	s := mustNew(t, m, on)
	want := jsonAnswer(corpus(t)[4].body)

	k := keystore.NewKey("claim")
	res, err := s.Reserve(ctx, k, reserveOpts())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := s.CompleteClaim(ctx, k, res.Claim, want); err != nil || c != keystore.Completed {
		t.Fatalf("CompleteClaim = %v, %v", c, err)
	}
	k2 := keystore.NewKey("admin")
	if _, err := s.Reserve(ctx, k2, reserveOpts()); err != nil {
		t.Fatal(err)
	}
	if err := s.ForceComplete(ctx, k2, want); err != nil {
		t.Fatalf("ForceComplete = %v", err)
	}
	for _, k := range []keystore.Key{k, k2} {
		if !rawAnswer(t, m, k).Compressed {
			t.Error("stored uncompressed; want compressed")
		}
		if rec, err := s.Get(ctx, k); err != nil || !reflect.DeepEqual(rec.Response, want) {
			t.Errorf("Get = %v; want the answer", err)
		}
	}

	bare := mustNew(t, storeOnly{m}, on)
	if err := bare.ForceRelease(ctx, k); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ForceRelease on a plain Store = %v; want ErrUnsupported", err)
	}
	if _, err := New(nil, on); err == nil {
		t.Error("New(nil) = nil error")
	}
}

// storeOnly hides every method beyond keystore.Store.
type storeOnly struct{ keystore.Store }

// corpusStore returns a memory store, a Store over it with o holding every
// corpus answer completed, the answers and their keys.
func corpusStore(t *testing.T, o Options) (*memstore.Store, *Store, []answer, []keystore.Key) {
	t.Helper()
	answers := corpus(t)
	m := memstore.New(memstore.Options{})
	t.Cleanup(func() { m.Close() })
	s := mustNew(t, m, o)
	keys := make([]keystore.Key, len(answers))
	for i, a := range answers {
		keys[i] = keystore.NewKey(a.name)
		complete(t, s, keys[i], jsonAnswer(a.body))
	}
	return m, s, answers, keys
}

// TestOpenCache: with OpenCacheBytes, the replays of one answer decode its
// frame once, every answer gets its own body (never another frame's, even
// of the same length), and the cache holds no more than its bound, the
// oldest frames going first; without it nothing is kept.
func TestOpenCache(t *testing.T) {
	ctx := context.Background()
	m, s, answers, keys := corpusStore(t, Options{Compress: true, OpenCacheBytes: 1 << 20})
	for round := range 3 {
		for i, a := range answers {
			res, err := s.Reserve(ctx, keys[i], reserveOpts())
			if err != nil || res.Response == nil || !bytes.Equal(res.Response.Body, a.body) || res.Response.Compressed {
				t.Fatalf("round %d, %s: replay = %v; want its own body", round, a.name, err)
			}
		}
	}
	st := s.OpenCacheStats()
	if st.Entries != len(answers) || st.Hits != uint64(2*len(answers)) {
		t.Errorf("cache: %d entries, %d hits; want %d and %d", st.Entries, st.Hits, len(answers), 2*len(answers))
	}
	if st.Bytes <= 0 || st.Bytes > 1<<20 {
		t.Errorf("cache holds %d bytes; want some, at most 1 MiB", st.Bytes)
	}
	// A reload that lowers the bound frees what is over it at once; one
	// that turns the cache off frees it all.
	s.Set(Options{Compress: true, OpenCacheBytes: int64(st.Bytes / 2)})
	if got := s.OpenCacheStats(); got.Bytes > st.Bytes/2 || got.Entries >= st.Entries {
		t.Errorf("after halving the bound: %d entries, %d bytes; want at most %d bytes", got.Entries, got.Bytes, st.Bytes/2)
	}
	s.Set(Options{Compress: true})
	if got := s.OpenCacheStats(); got.Bytes != 0 || got.Entries != 0 {
		t.Errorf("with the cache off: %d entries, %d bytes held; want none", got.Entries, got.Bytes)
	}

	// Two frames of the same length and nearly the same bytes.
	a := bytes.Repeat([]byte(`{"amount":1999,"currency":"eur"},`), 40)
	b := bytes.Clone(a)
	b[len(b)/2] = 'X'
	fa, fb := frame(a), frame(b)
	var c frameCache
	for range 2 {
		for _, tc := range []struct{ fr, want []byte }{{fa, a}, {fb, b}} {
			got, err := open(&keystore.Response{Status: 200, Body: tc.fr, Compressed: true}, DefaultMaxBodyBytes, &c, 1<<20)
			if err != nil || !bytes.Equal(got.Body, tc.want) {
				t.Fatalf("open = %v; want the frame's own body", err)
			}
		}
	}

	// The bound: a 16 KiB cache keeps the newest answers only.
	var small frameCache
	const max = 16 << 10
	for i := range 50 {
		body := bytes.Repeat([]byte(fmt.Sprintf(`{"n":%d,"pad":"%s"},`, i, strings.Repeat("x", i))), 30)
		if _, err := open(&keystore.Response{Status: 200, Body: frame(body), Compressed: true}, DefaultMaxBodyBytes, &small, max); err != nil {
			t.Fatal(err)
		}
		if _, size, _ := small.stats(); size > max {
			t.Fatalf("after %d frames the cache holds %d bytes; want at most %d", i+1, size, max)
		}
	}
	last := bytes.Repeat([]byte(fmt.Sprintf(`{"n":%d,"pad":"%s"},`, 49, strings.Repeat("x", 49))), 30)
	if _, ok := small.get(frame(last)); !ok {
		t.Error("the newest frame is not kept")
	}
	first := bytes.Repeat([]byte(`{"n":0,"pad":""},`), 30)
	if _, ok := small.get(frame(first)); ok {
		t.Error("the oldest frame is still kept past the bound")
	}

	// Off: nothing kept.
	off := mustNew(t, m, Options{Compress: true})
	for range 2 {
		if _, err := off.Reserve(ctx, keys[0], reserveOpts()); err != nil {
			t.Fatal(err)
		}
	}
	if st := off.OpenCacheStats(); st.Entries != 0 || st.Hits != 0 {
		t.Errorf("without OpenCacheBytes: %d entries, %d hits; want none", st.Entries, st.Hits)
	}
}

// TestOpenCacheConcurrent: many goroutines replaying a few answers at once,
// through a cache smaller than them all (so that entries come and go), each
// get their own answer's body, exactly.
func TestOpenCacheConcurrent(t *testing.T) {
	ctx := context.Background()
	_, s, answers, keys := corpusStore(t, Options{Compress: true, OpenCacheBytes: 24 << 10})
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				i := (g + j) % len(answers)
				res, err := s.Reserve(ctx, keys[i], reserveOpts())
				if err != nil || res.Response == nil || !bytes.Equal(res.Response.Body, answers[i].body) {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of %d replays got another body or an error", n, 16*200)
	}
	if st := s.OpenCacheStats(); st.Bytes > 24<<10 || st.Hits == 0 {
		t.Errorf("cache: %d bytes, %d hits; want at most 24 KiB and some hits", st.Bytes, st.Hits)
	}
}
