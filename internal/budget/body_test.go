package budget

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

// chunkReader returns src in reads of at most n bytes, and calls onRead
// before each with the bytes returned so far.
type chunkReader struct {
	src    []byte
	n      int
	off    int
	onRead func(arrived int)
	err    error // returned instead of io.EOF at the end, when set
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if c.onRead != nil {
		c.onRead(c.off)
	}
	if c.off == len(c.src) {
		if c.err != nil {
			return 0, c.err
		}
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.src[c.off:])
	c.off += n
	return n, nil
}

func TestReadBody(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 100_000)
	for _, tc := range []struct {
		name     string
		body     []byte
		length   int64 // announced; -1 chunked
		limit    int64
		budget   int64
		chunk    int
		srcErr   error
		wantErr  error
		wantHeld int64 // after a successful read
	}{
		{"small known", []byte(`{"a":1}`), 7, 100, 1000, 3, nil, nil, 7},
		{"small chunked", []byte(`{"a":1}`), -1, 100, 1000, 3, nil, nil, 100},
		{"empty known", nil, 0, 100, 1000, 1, nil, nil, 0},
		{"empty chunked", nil, -1, 100, 1000, 1, nil, nil, 100},
		{"exactly the limit", big[:100], -1, 100, 1000, 7, nil, nil, 100},
		{"exactly the limit known", big[:100], 100, 100, 1000, 7, nil, nil, 100},
		{"one over the limit chunked", big[:101], -1, 100, 1000, 7, nil, ErrTooLarge, 0},
		{"announced over the limit", big[:10], 101, 100, 1000, 7, nil, ErrTooLarge, 0},
		{"large known grows to its length", big, int64(len(big)), 1 << 20, 1 << 20, 4096, nil, nil, int64(len(big))},
		{"large chunked", big, -1, 1 << 20, 1 << 20, 4096, nil, nil, 131072},
		{"large over a small budget", big, int64(len(big)), 1 << 20, 50_000, 4096, nil, ErrOverloaded, 0},
		{"eager buffer over the budget", big[:10], -1, 1 << 20, 1000, 1, nil, ErrOverloaded, 0},
		{"broken body", big[:50], -1, 100, 1000, 7, io.ErrUnexpectedEOF, ErrInvalid, 0},
		{"max bytes reader", big[:50], -1, 100, 1000, 7, &http.MaxBytesError{Limit: 40}, ErrTooLarge, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(tc.budget, tc.budget)
			k := key("192.0.2.7")
			src := &chunkReader{src: tc.body, n: tc.chunk, err: tc.srcErr}
			req := httptest.NewRequest(http.MethodPost, "/", src)
			req.ContentLength = tc.length
			if tc.length == 0 {
				req.Body = http.NoBody
			}
			body, err := b.ReadBody(k, req, &ReadOptions{Limit: tc.limit})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v; want %v", err, tc.wantErr)
				}
				if b.Used() != 0 {
					t.Errorf("after an error, used = %d; want 0", b.Used())
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v", err)
			}
			if !bytes.Equal(body.Bytes(), tc.body) {
				t.Errorf("read %d bytes; want %d", body.Len(), len(tc.body))
			}
			if b.UsedBy(k) != tc.wantHeld || body.Held() != tc.wantHeld {
				t.Errorf("held %d (budget says %d); want %d", body.Held(), b.UsedBy(k), tc.wantHeld)
			}
			if req.ContentLength != int64(len(tc.body)) || req.GetBody != nil {
				t.Errorf("request: ContentLength %d, GetBody set %v; want %d, false", req.ContentLength, req.GetBody != nil, len(tc.body))
			}
			again, _ := io.ReadAll(req.Body)
			if !bytes.Equal(again, tc.body) {
				t.Errorf("r.Body reads %d bytes; want the %d read", len(again), len(tc.body))
			}
			if err := req.Body.Close(); err != nil {
				t.Error(err)
			}
			body.Free()
			body.Free()
			if b.Used() != 0 {
				t.Errorf("after Free twice, used = %d; want 0", b.Used())
			}
		})
	}
}

// TestReadBodyChargesAsBytesArrive: a 1 MiB body announced by its
// Content-Length never holds more than max(eagerBytes, 2 × arrived bytes)
// while it is read.
func TestReadBodyChargesAsBytesArrive(t *testing.T) {
	t.Parallel()
	for _, length := range []int64{1 << 20, -1} {
		b := New(8<<20, 8<<20)
		k := key("192.0.2.8")
		data := bytes.Repeat([]byte("[0,"), 1<<20/3)
		var worst int64
		src := &chunkReader{src: data, n: 1000, onRead: func(arrived int) {
			if over := b.UsedBy(k) - max(eagerBytes, 2*int64(arrived)); over > worst {
				worst = over
			}
		}}
		if length > 0 {
			length = int64(len(data))
		}
		body, err := b.Read(k, src, length, &ReadOptions{Limit: 2 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if worst > 0 {
			t.Errorf("length %d: held up to %d bytes more than max(eagerBytes, 2×arrived)", length, worst)
		}
		if length > 0 && body.Held() != length {
			t.Errorf("known length: held %d at the end; want exactly %d", body.Held(), length)
		}
		body.Free()
		if b.Used() != 0 {
			t.Errorf("used after Free %d", b.Used())
		}
	}
}

// TestReadBodyAllocs: a small body of known length costs its buffer and the
// Body, nothing else.
func TestReadBodyAllocs(t *testing.T) {
	b := New(1<<20, 1<<20)
	k := key("192.0.2.9")
	data := []byte(`{"amount":100,"currency":"EUR"}`)
	src := bytes.NewReader(data)
	opt := &ReadOptions{Limit: 1 << 20, Deadline: time.Now().Add(time.Hour)}
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(data)
		body, err := b.Read(k, src, int64(len(data)), opt)
		if err != nil {
			t.Fatal(err)
		}
		body.Free()
	})
	if allocs != 2 {
		t.Errorf("allocs per small read = %v; want 2 (buffer and Body)", allocs)
	}
}

// TestReadBodyDeadlineTrickle: without a ResponseWriter, a client that keeps
// sending a byte at a time is stopped by the clock check once the deadline
// passes, however much it still has to send.
func TestReadBodyDeadlineTrickle(t *testing.T) {
	t.Parallel()
	b := New(1<<20, 1<<20)
	k := key("192.0.2.10")
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	deadline := now.Add(30 * time.Second)
	var reads int
	src := &chunkReader{src: bytes.Repeat([]byte("a"), 10_000), n: 1, onRead: func(int) {
		reads++
		now = now.Add(time.Second) // one byte a second
	}}
	_, err := b.Read(k, src, 10_000, &ReadOptions{Limit: 1 << 20, Deadline: deadline, Now: func() time.Time { return now }})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v; want ErrTimeout", err)
	}
	if reads != 30 {
		t.Errorf("reads before the timeout = %d; want 30 (stopped at the deadline)", reads)
	}
	if b.Used() != 0 {
		t.Errorf("used after a timeout = %d; want 0", b.Used())
	}
}

// TestReadBodyCompleteAtDeadline: a body whose last read ends with EOF is
// taken even when the clock says the deadline passed during it.
func TestReadBodyCompleteAtDeadline(t *testing.T) {
	t.Parallel()
	b := New(1<<20, 1<<20)
	now := time.Unix(0, 0)
	src := strings.NewReader("hello")
	body, err := b.Read(key("192.0.2.11"), io.MultiReader(src), 5, &ReadOptions{Deadline: now, Now: func() time.Time { return now }})
	if err == nil {
		// MultiReader returns the data, then EOF in a second read: the
		// first read's return is checked against the deadline.
		t.Fatalf("read %q; want ErrTimeout, since the clock was past the deadline before EOF", body.Bytes())
	}
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v; want ErrTimeout", err)
	}
	body, err = b.Read(key("192.0.2.11"), &eofReader{data: []byte("hello")}, 5, &ReadOptions{Deadline: now, Now: func() time.Time { return now }})
	if err != nil || string(body.Bytes()) != "hello" {
		t.Fatalf("read %v, %v; want hello: data with EOF is complete", body, err)
	}
	body.Free()
}

// eofReader returns all its data with io.EOF in one read.
type eofReader struct{ data []byte }

func (e *eofReader) Read(p []byte) (int, error) {
	n := copy(p, e.data)
	e.data = e.data[n:]
	if len(e.data) == 0 {
		return n, io.EOF
	}
	return n, nil
}

func TestBodyCharge(t *testing.T) {
	t.Parallel()
	b := New(1000, 1000)
	k := key("192.0.2.12")
	body, err := b.Read(k, strings.NewReader("abc"), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := body.Charge(500); err != nil {
		t.Fatal(err)
	}
	if err := body.Charge(498); !errors.Is(err, ErrOverloaded) {
		t.Errorf("charge over the budget = %v; want ErrOverloaded", err)
	}
	if body.Held() != 503 || b.Used() != 503 {
		t.Errorf("held %d, used %d; want 503, 503", body.Held(), b.Used())
	}
	body.Uncharge(400)
	if body.Held() != 103 || b.Used() != 103 {
		t.Errorf("after Uncharge(400): held %d, used %d; want 103, 103", body.Held(), b.Used())
	}
	body.Uncharge(1000)
	if body.Held() != 0 || b.Used() != 0 {
		t.Errorf("after Uncharge(1000): held %d, used %d; want 0, 0", body.Held(), b.Used())
	}
	body.Free()
	if b.Used() != 0 {
		t.Errorf("used after Free = %d; want 0", b.Used())
	}
}

func TestReadBodyNilBody(t *testing.T) {
	t.Parallel()
	b := New(1000, 1000)
	req, _ := http.NewRequest(http.MethodPost, "http://x/", nil)
	body, err := b.ReadBody(limiter.Key{}, req, &ReadOptions{Limit: 10})
	if err != nil || body.Len() != 0 || b.Used() != 0 {
		t.Fatalf("nil body: %v, len %d, used %d", err, body.Len(), b.Used())
	}
}

// TestReadBodyRestOnError: after an error, r.Body reads the request as it
// came (observe mode forwards it): the bytes read, then the rest, or the
// same read failure.
func TestReadBodyRestOnError(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789"), 30) // 300 bytes
	for _, tc := range []struct {
		name    string
		length  int64
		limit   int64
		budget  int64
		srcErr  error
		wantErr error
	}{
		{"too large chunked", -1, 100, 1000, nil, ErrTooLarge},
		{"one over at the probe", -1, 299, 1000, nil, ErrTooLarge},
		{"overloaded while growing", -1, 1 << 20, 200, nil, ErrOverloaded},
		{"broken body", -1, 1 << 20, 1 << 20, io.ErrUnexpectedEOF, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := New(tc.budget, tc.budget)
			src := &chunkReader{src: data, n: 7, err: tc.srcErr}
			req := httptest.NewRequest(http.MethodPost, "/", src)
			req.ContentLength = tc.length
			_, err := b.ReadBody(key("192.0.2.30"), req, &ReadOptions{Limit: tc.limit})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v; want %v", err, tc.wantErr)
			}
			got, rerr := io.ReadAll(req.Body)
			if !bytes.Equal(got, data) {
				t.Errorf("r.Body after the error reads %d bytes; want the %d sent", len(got), len(data))
			}
			if rerr != tc.srcErr {
				t.Errorf("r.Body's error = %v; want %v", rerr, tc.srcErr)
			}
			if b.Used() != 0 {
				t.Errorf("used = %d; want 0", b.Used())
			}
		})
	}
}

// TestReadBodyDropOnError: with DropOnError (enforce mode) a failed read
// leaves r.Body as it was, so the request no longer reaches the bytes read
// (refunded to the budget, they must not stay live through it).
func TestReadBodyDropOnError(t *testing.T) {
	t.Parallel()
	data := bytes.Repeat([]byte("0123456789"), 30) // 300 bytes
	b := New(200, 200)
	src := &chunkReader{src: data, n: 7}
	req := httptest.NewRequest(http.MethodPost, "/", src)
	req.ContentLength = -1
	orig := req.Body
	if _, err := b.ReadBody(key("192.0.2.31"), req, &ReadOptions{DropOnError: true}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("err = %v; want ErrOverloaded", err)
	}
	if req.Body != orig {
		t.Errorf("r.Body replaced (%T); want the original", req.Body)
	}
	if b.Used() != 0 {
		t.Errorf("used = %d; want 0", b.Used())
	}
}
