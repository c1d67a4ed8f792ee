package budget

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"testing"
)

func gz(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zl(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func raw(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecode(t *testing.T) {
	t.Parallel()
	plain := []byte(`{"amount":100,"items":[1,2,3]}`)
	bomb := bytes.Repeat([]byte{'0'}, 3<<20) // 3 MiB of zeros, ~3 KiB gzipped
	good := gz(t, plain)
	for _, tc := range []struct {
		name    string
		body    []byte
		enc     string
		limit   int64
		budget  int64
		want    []byte
		wantErr error
	}{
		{"none", plain, "", 1000, 1 << 20, plain, nil},
		{"identity", plain, "Identity", 1000, 1 << 20, plain, nil},
		{"identity over the limit", plain, "identity", 10, 1 << 20, nil, ErrTooLarge},
		{"gzip", good, "gzip", 1000, 1 << 20, plain, nil},
		{"x-gzip upper case", good, " X-GZIP ", 1000, 1 << 20, plain, nil},
		{"deflate zlib", zl(t, plain), "deflate", 1000, 1 << 20, plain, nil},
		{"deflate raw", raw(t, plain), "deflate", 1000, 1 << 20, plain, nil},
		{"gzip twice", gz(t, good), "gzip, gzip", 1000, 1 << 20, plain, nil},
		{"deflate then gzip", gz(t, zl(t, plain)), "deflate,gzip", 1000, 1 << 20, plain, nil},
		{"concatenated members", append(gz(t, plain[:5]), gz(t, plain[5:])...), "gzip", 1000, 1 << 20, plain, nil},
		{"exactly the limit", good, "gzip", int64(len(plain)), 1 << 20, plain, nil},
		{"one over the limit", good, "gzip", int64(len(plain)) - 1, 1 << 20, nil, ErrTooLarge},
		{"bomb", gz(t, bomb), "gzip", 1 << 20, 8 << 20, nil, ErrTooLarge},
		{"bomb over the budget", gz(t, bomb), "gzip", 16 << 20, 1 << 20, nil, ErrOverloaded},
		{"br", plain, "br", 1000, 1 << 20, nil, ErrUnsupportedEncoding},
		{"gzip then br", plain, "gzip, br", 1000, 1 << 20, nil, ErrUnsupportedEncoding},
		{"not gzip", plain, "gzip", 1000, 1 << 20, nil, ErrInvalid},
		{"empty gzip", nil, "gzip", 1000, 1 << 20, nil, ErrInvalid},
		{"truncated", good[:len(good)-5], "gzip", 1000, 1 << 20, nil, ErrInvalid},
		{"bad checksum", append(append([]byte{}, good[:len(good)-8]...), 0, 0, 0, 0, 0, 0, 0, 0), "gzip", 1000, 1 << 20, nil, ErrInvalid},
		{"trailing garbage", append(append([]byte{}, good...), "xyz"...), "gzip", 1000, 1 << 20, nil, ErrInvalid},
		{"not deflate", []byte{0xff, 0xff, 0xff}, "deflate", 1000, 1 << 20, nil, ErrInvalid},
		{"identity does not count", gz(t, good), "identity, gzip, identity, gzip", 1000, 1 << 20, plain, nil},
		{"three codings", gz(t, gz(t, good)), "gzip, gzip, gzip", 1000, 1 << 20, nil, ErrTooManyCodings},
		{"three codings are invalid", gz(t, gz(t, good)), "gzip,deflate,gzip", 1000, 1 << 20, nil, ErrInvalid},
		{"three unsupported codings", plain, "br, br, br", 1000, 1 << 20, nil, ErrTooManyCodings},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(tc.budget, tc.budget)
			k := key("192.0.2.20")
			body, err := b.Read(k, bytes.NewReader(tc.body), int64(len(tc.body)), nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := body.Decode(tc.enc, tc.limit)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v; want %v", err, tc.wantErr)
				}
			} else if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("Decode = %q, %v; want %q", got, err, tc.want)
			}
			if b.Used() > tc.budget || body.Held() != b.Used() {
				t.Errorf("held %d, budget used %d (of %d)", body.Held(), b.Used(), tc.budget)
			}
			if tc.wantErr == nil && tc.enc != "" && tc.enc != "Identity" && body.Held() < int64(len(tc.body)+len(tc.want)) {
				t.Errorf("held %d; want at least body %d + decoded %d", body.Held(), len(tc.body), len(tc.want))
			}
			body.Free()
			if b.Used() != 0 {
				t.Errorf("used after Free = %d; want 0", b.Used())
			}
		})
	}
}

// TestDecodeBombHeld: a gzip bomb stopped at the limit held at most about
// twice the limit (the last doubling) plus the decoder.
func TestDecodeBombHeld(t *testing.T) {
	t.Parallel()
	b := New(64<<20, 64<<20)
	k := key("192.0.2.21")
	src := gz(t, bytes.Repeat([]byte{'0'}, 3<<20))
	body, err := b.Read(k, bytes.NewReader(src), int64(len(src)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := body.Decode("gzip", 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err = %v; want ErrTooLarge", err)
	}
	if extra := body.Held() - int64(len(src)); extra > 1<<20 {
		t.Errorf("a bomb stopped at 1 MiB left %d bytes charged; want at most 1 MiB", extra)
	}
	body.Free()
}

func FuzzDecode(f *testing.F) {
	f.Add(gz(f, []byte(`{"a":1}`)), "gzip")
	f.Add(zl(f, []byte(`[1,2]`)), "deflate")
	f.Add(raw(f, []byte(`"x"`)), "deflate")
	f.Add([]byte("plain"), "")
	f.Fuzz(func(t *testing.T, data []byte, enc string) {
		b := New(1<<20, 1<<20)
		body, err := b.Read(key("192.0.2.22"), bytes.NewReader(data), int64(len(data)), nil)
		if err != nil {
			return
		}
		out, err := body.Decode(enc, 64<<10)
		switch {
		case err == nil:
			if len(out) > 64<<10 {
				t.Errorf("decoded %d bytes past the limit", len(out))
			}
		case errors.Is(err, ErrInvalid), errors.Is(err, ErrTooLarge), errors.Is(err, ErrOverloaded), errors.Is(err, ErrUnsupportedEncoding):
		default:
			t.Errorf("Decode error %v wraps no sentinel", err)
		}
		body.Free()
		if b.Used() != 0 {
			t.Errorf("used after Free = %d", b.Used())
		}
	})
}
