package compressed

import (
	"bytes"
	"errors"
	"testing"

	"github.com/idemgate/idemgate/keystore"
)

// FuzzOpen: whatever bytes a compressed record holds, opening them never
// panics, returns a body no longer than the bound, and fails only with
// ErrMalformedResponse; through a cache of opened frames, twice (the
// second from the cache when the first opened), it answers exactly as
// without; an answer compressed by the store opens to itself.
func FuzzOpen(f *testing.F) {
	const bound = 8 << 10
	for _, a := range corpus(f) {
		fr := frame(a.body)
		f.Add(fr)
		f.Add(fr[:len(fr)/2])
	}
	f.Add(frame(make([]byte, 1<<20)))
	f.Add(rawFrame([]byte("raw block, no content size")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := open(&keystore.Response{Status: 200, Body: b, Compressed: true}, bound, nil, 0)
		if err != nil {
			if !errors.Is(err, keystore.ErrMalformedResponse) {
				t.Fatalf("open = %v; want ErrMalformedResponse", err)
			}
		} else if len(got.Body) > bound || got.Compressed {
			t.Fatalf("open = %d bytes, compressed %v; want at most %d, opened", len(got.Body), got.Compressed, bound)
		}
		var cache frameCache
		for i := range 2 {
			// The caller's bytes are its own: the cache keeps a copy.
			in := bytes.Clone(b)
			c, cerr := open(&keystore.Response{Status: 200, Body: in, Compressed: true}, bound, &cache, 1<<20)
			if (cerr == nil) != (err == nil) || (err == nil && !bytes.Equal(c.Body, got.Body)) {
				t.Fatalf("open through the cache, %d: %v; want as without (%v)", i, cerr, err)
			}
			clear(in)
		}
		if len(b) < MinSize || len(b) > bound {
			return
		}
		stored := compress(&keystore.Response{Status: 201, Body: b}, Options{Compress: true, MaxBodyBytes: bound})
		back, err := open(stored, bound, nil, 0)
		if err != nil || !bytes.Equal(back.Body, b) || back.Compressed {
			t.Fatalf("round trip of %d bytes = %v; want the body", len(b), err)
		}
	})
}
