package sealed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fakeClock = testutil.Clock

func newMem(t testing.TB) (*memstore.Store, *fakeClock) {
	clk := testutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	m := memstore.New(memstore.Options{Now: clk.Now})
	t.Cleanup(func() { m.Close() })
	return m, clk
}

func newKey(t testing.TB) Key {
	var b [32]byte
	rand.Read(b[:])
	k, err := ParseKey(base64.StdEncoding.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func mustNew(t testing.TB, inner keystore.Store, current Key, older ...Key) *Store {
	t.Helper()
	s, err := New(inner, current, older...)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
		m, clk := newMem(t)
		return mustNew(t, m, newKey(t)), clk.Advance
	})
}

func opts() keystore.ReserveOptions {
	return keystore.ReserveOptions{Fingerprint: keystore.Fingerprint(keystore.NewKey("fp")), Route: "r", Lease: time.Minute, Retention: time.Hour}
}

func answer() *keystore.Response {
	return &keystore.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"session=s3cr3t-cookie"}},
		Body:   []byte(`{"card":"4111-secret-body"}`),
	}
}

// store completes k with resp through s and returns the claim's token.
func store(t *testing.T, s keystore.Store, k keystore.Key, resp *keystore.Response) {
	t.Helper()
	ctx := context.Background()
	res, err := s.Reserve(ctx, k, opts())
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	if err := s.Complete(ctx, k, res.Token, resp); err != nil {
		t.Fatalf("Complete = %v", err)
	}
}

func replay(t *testing.T, s keystore.Store, k keystore.Key) (*keystore.Response, error) {
	t.Helper()
	res, err := s.Reserve(context.Background(), k, opts())
	if err == nil && res.Response == nil {
		t.Fatalf("Reserve = %+v; want a replay", res)
	}
	return res.Response, err
}

// The inner store holds neither the body nor the headers in clear.
func TestInnerHoldsCiphertext(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, m, newKey(t))
	k := keystore.NewKey("k")
	store(t, s, k, answer())
	rec, err := m.Get(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	r := rec.Response
	if r.Header != nil || r.Status != 201 || r.TooLarge {
		t.Errorf("inner response: header %v, status %d, too large %v; want nil header, 201, false", r.Header, r.Status, r.TooLarge)
	}
	for _, secret := range []string{"4111-secret-body", "s3cr3t-cookie", "application/json", "Set-Cookie"} {
		if bytes.Contains(r.Body, []byte(secret)) {
			t.Errorf("inner body contains %q in clear", secret)
		}
	}
	got, err := s.Get(context.Background(), k)
	if err != nil || !reflect.DeepEqual(got.Response, answer()) {
		t.Errorf("Get = %+v, %v; want the answer", got.Response, err)
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	k1, k2, k3 := newKey(t), newKey(t), newKey(t)
	old := mustNew(t, m, k1)
	a := keystore.NewKey("sealed with k1")
	store(t, old, a, answer())

	rotated := mustNew(t, m, k2, k3, k1)
	if got, err := replay(t, rotated, a); err != nil || !reflect.DeepEqual(got, answer()) {
		t.Errorf("replay of an old record after rotation = %+v, %v; want the answer", got, err)
	}
	b := keystore.NewKey("sealed with k2")
	store(t, rotated, b, answer())
	if rec, _ := m.Get(context.Background(), b); rec.Response.Body[1] != k2.ID() {
		t.Errorf("new record's key id = %d; want the current key's %d", rec.Response.Body[1], k2.ID())
	}
	// A replica still on the old key cannot open the new record: an error,
	// not garbage.
	if _, err := replay(t, old, b); !errors.Is(err, ErrUnsealable) {
		t.Errorf("replay with only the old key = %v; want ErrUnsealable", err)
	}
	// Once the old key is dropped, its records no longer open.
	dropped := mustNew(t, m, k2)
	if _, err := replay(t, dropped, a); !errors.Is(err, ErrUnsealable) {
		t.Errorf("replay after dropping the old key = %v; want ErrUnsealable", err)
	}
	if _, err := dropped.Get(context.Background(), a); !errors.Is(err, ErrUnsealable) {
		t.Errorf("Get after dropping the old key = %v; want ErrUnsealable", err)
	}
}

// Keys that share an id are both tried.
func TestSharedKeyID(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	k1 := newKey(t)
	var k2 Key
	for k2 = newKey(t); k2.ID() != k1.ID(); k2 = newKey(t) {
	}
	a := keystore.NewKey("a")
	store(t, mustNew(t, m, k1), a, answer())
	if got, err := replay(t, mustNew(t, m, k2, k1), a); err != nil || !reflect.DeepEqual(got, answer()) {
		t.Errorf("replay with two keys of id %d = %+v, %v; want the answer", k1.ID(), got, err)
	}
}

func TestWrongKey(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	a := keystore.NewKey("a")
	store(t, mustNew(t, m, newKey(t)), a, answer())
	if _, err := replay(t, mustNew(t, m, newKey(t)), a); !errors.Is(err, ErrUnsealable) {
		t.Errorf("replay with another key = %v; want ErrUnsealable", err)
	}
}

// Tampering with the stored answer, or moving it to another record, is
// detected.
func TestTamperingAndMoving(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := newKey(t)
	for _, tc := range []struct {
		name string
		edit func(s *Store, k keystore.Key) *keystore.Response // what to store at k
	}{
		{"flipped ciphertext bit", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.Body[len(r.Body)/2] ^= 1
			return r
		}},
		{"flipped tag bit", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.Body[len(r.Body)-1] ^= 0x80
			return r
		}},
		{"truncated", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.Body = r.Body[:len(r.Body)-1]
			return r
		}},
		{"status changed", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.Status = 200
			return r
		}},
		{"marked too large", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.TooLarge = true
			return r
		}},
		{"key id changed", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.Body[1]++
			return r
		}},
		{"moved from another key", func(s *Store, k keystore.Key) *keystore.Response {
			return s.seal(keystore.NewKey("another record"), answer())
		}},
		{"never sealed", func(s *Store, k keystore.Key) *keystore.Response { return answer() }},
		{"header added", func(s *Store, k keystore.Key) *keystore.Response {
			r := s.seal(k, answer())
			r.Header = http.Header{"X": {"y"}}
			return r
		}},
		{"empty", func(s *Store, k keystore.Key) *keystore.Response { return &keystore.Response{Status: 201} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, _ := newMem(t)
			s := mustNew(t, m, key)
			k := keystore.NewKey(tc.name)
			// Write through the inner store, as an attacker with access to
			// Redis would.
			res, err := m.Reserve(ctx, k, opts())
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Complete(ctx, k, res.Token, tc.edit(s, k)); err != nil {
				t.Fatal(err)
			}
			if got, err := replay(t, s, k); !errors.Is(err, ErrUnsealable) {
				t.Errorf("replay = %+v, %v; want ErrUnsealable", got, err)
			}
			if _, err := s.Get(ctx, k); !errors.Is(err, ErrUnsealable) {
				t.Errorf("Get = %v; want ErrUnsealable", err)
			}
		})
	}
}

func TestTooLargeAndEmpty(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, m, newKey(t))
	for i, want := range []*keystore.Response{
		{Status: 200, TooLarge: true},
		{Status: 204},
		{Status: 200, Header: http.Header{}, Body: []byte{}},
	} {
		k := keystore.NewKey("k", string(rune('a'+i)))
		store(t, s, k, want)
		if got, err := replay(t, s, k); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("replay = %#v, %v; want %#v", got, err, want)
		}
	}
}

// notAdmin hides memstore's Admin methods.
type notAdmin struct{ keystore.Store }

func TestAdminUnsupported(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, notAdmin{m}, newKey(t))
	ctx := context.Background()
	if _, err := s.InFlight(ctx, 0, 1); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("InFlight = %v; want ErrUnsupported", err)
	}
	if err := s.ForceRelease(ctx, keystore.NewKey("k")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ForceRelease = %v; want ErrUnsupported", err)
	}
	if err := s.ForceComplete(ctx, keystore.NewKey("k"), answer()); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ForceComplete = %v; want ErrUnsupported", err)
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	raw := bytes.Repeat([]byte{0xfb}, 32)
	for _, tc := range []struct {
		name, in, wantErr string
	}{
		{"std", base64.StdEncoding.EncodeToString(raw), ""},
		{"raw std", base64.RawStdEncoding.EncodeToString(raw), ""},
		{"url", base64.URLEncoding.EncodeToString(raw), ""},
		{"raw url", base64.RawURLEncoding.EncodeToString(raw), ""},
		{"trailing newline", base64.StdEncoding.EncodeToString(raw) + "\n", ""},
		{"empty", "", "empty key"},
		{"not base64", "!!!!", "not valid base64"},
		{"16 bytes", base64.StdEncoding.EncodeToString(raw[:16]), "key is 16 bytes; want exactly 32"},
		{"33 bytes", base64.StdEncoding.EncodeToString(append(raw, 1)), "key is 33 bytes; want exactly 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			k, err := ParseKey(tc.in)
			if tc.wantErr == "" {
				if err != nil || k.b != [32]byte(raw) {
					t.Errorf("ParseKey = %v; want the key", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseKey = %v; want an error containing %q", err, tc.wantErr)
			}
		})
	}
	m, _ := newMem(t)
	if _, err := New(m, Key{}); err == nil {
		t.Errorf("New with the zero Key = nil error; want an error")
	}
	if _, err := New(m, newKey(t), Key{}); err == nil {
		t.Errorf("New with a zero older Key = nil error; want an error")
	}
}

// A compressed answer (keystore/compressed, which compresses before
// sealing) keeps its mark through sealing, and the releases before it
// cannot open it: their plaintext decoder (the first release's, commit
// 768a101) refused any flag but header|body, so they fail closed
// (ErrUnsealable, 503) instead of replaying compressed bytes.
func TestSealedCompressed(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, m, newKey(t))
	k := keystore.NewKey("compressed")
	want := &keystore.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte("zstd frame"), Compressed: true}
	store(t, s, k, want)
	if got, err := replay(t, s, k); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("replay = %+v, %v; want %+v", got, err, want)
	}
	const olderFlags = 1<<0 | 1<<1 // the only flags older decoders accept
	if p := encodePlain(want); p[0]&^olderFlags == 0 {
		t.Errorf("plaintext flags %#x: an older release would open this as a plain body", p[0])
	}
	if p := encodePlain(answer()); p[0]&^olderFlags != 0 {
		t.Errorf("plaintext flags %#x of a plain answer: older releases could no longer open it", p[0])
	}
	if _, err := decodePlain([]byte{plainCompressed, 0}); err == nil {
		t.Error("compressed without a body decodes; want an error")
	}
}

func FuzzDecodePlain(f *testing.F) {
	f.Add(encodePlain(answer()))
	f.Add([]byte{3, 0})
	f.Add([]byte{6, 0, 1, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodePlain(b)
		if err != nil {
			return
		}
		if r2, err := decodePlain(encodePlain(r)); err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip of %v: %+v vs %+v, %v", b, r, r2, err)
		}
	})
}

func BenchmarkSealed(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) keystore.Store {
		m := memstore.New(memstore.Options{})
		b.Cleanup(func() { m.Close() })
		return mustNew(b, m, newKey(b))
	})
}

// damagedListing is a memory store whose listing also returns a record
// with an answer that is not sealed, and one damaged record it skipped
// itself, as a Redis store reports a foreign value.
type damagedListing struct{ *memstore.Store }

func (d damagedListing) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	recs, err := d.Store.InFlight(ctx, olderThan, limit)
	if err != nil {
		return nil, err
	}
	recs = append(recs, keystore.Record{Key: keystore.NewKey("unsealed"), State: keystore.StateInFlight,
		Response: &keystore.Response{Status: 200, Body: []byte("plain")}})
	dmg := &keystore.DamagedError{}
	dmg.Add("idemgate:{foreign}", errors.New("corrupt"))
	return recs, dmg
}

// TestInFlightSkipsDamaged: a listing through the sealed store skips a
// record whose answer does not open and keeps the inner store's count of
// skipped records (issue 28, item 8); the readable records come through.
func TestInFlightSkipsDamaged(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s := mustNew(t, damagedListing{m}, newKey(t))
	ctx := context.Background()
	good := keystore.NewKey("good")
	if _, err := s.Reserve(ctx, good, keystore.ReserveOptions{Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.InFlight(ctx, 0, 10)
	var dmg *keystore.DamagedError
	if !errors.As(err, &dmg) || dmg.Count != 2 || !slices.Contains(dmg.Names, keystore.NewKey("unsealed").String()) || !slices.Contains(dmg.Names, "idemgate:{foreign}") {
		t.Fatalf("InFlight = %v; want a DamagedError counting the foreign and the unsealed record", err)
	}
	if len(recs) != 1 || recs[0].Key != good {
		t.Errorf("InFlight = %+v; want the good record alone", recs)
	}
}

// SetKeys changes a running Store's keys: sealing turned on, rotated and
// turned off, each for the calls after it. Answers sealed before open while
// their key is kept; an answer stored in clear is read as it is only while
// the Store does not seal; a sealed envelope that no kept key opens is an
// error in either mode, never replayed as its ciphertext.
func TestSetKeys(t *testing.T) {
	t.Parallel()
	m, _ := newMem(t)
	s, err := Wrap(m)
	if err != nil {
		t.Fatal(err)
	}
	ka, kb := newKey(t), newKey(t)
	ctx := context.Background()
	innerID := func(k keystore.Key) (byte, bool) {
		rec, err := m.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if !enveloped(rec.Response) {
			return 0, false
		}
		return rec.Response.Body[1], true
	}
	inClear, sealedA, sealedB := keystore.NewKey("clear"), keystore.NewKey("a"), keystore.NewKey("b")
	if _, ok := s.Sealing(); ok {
		t.Fatal("Wrap's Store seals; want it not to until SetKeys")
	}
	store(t, s, inClear, answer())
	if _, sealed := innerID(inClear); sealed {
		t.Fatal("an answer stored before any key is sealed")
	}
	steps := []struct {
		name    string
		current Key
		older   []Key
		write   keystore.Key // stored after the change (zero: none)
		wantID  byte         // its key id, when sealed
		sealed  bool
		opens   []keystore.Key // replay as the answer
		refused []keystore.Key // ErrUnsealable
	}{
		{"on with A", ka, nil, sealedA, ka.ID(), true, []keystore.Key{sealedA}, []keystore.Key{inClear}},
		{"rotated to B, A kept", kb, []Key{ka}, sealedB, kb.ID(), true, []keystore.Key{sealedA, sealedB}, []keystore.Key{inClear}},
		{"off, A and B kept", Key{}, []Key{kb, ka}, keystore.NewKey("clear again"), 0, false, []keystore.Key{inClear, sealedA, sealedB, keystore.NewKey("clear again")}, nil},
		{"off, A dropped", Key{}, []Key{kb}, keystore.Key{}, 0, false, []keystore.Key{inClear, sealedB}, []keystore.Key{sealedA}},
		{"on with A again", ka, nil, keystore.Key{}, 0, false, []keystore.Key{sealedA}, []keystore.Key{inClear, sealedB}},
	}
	for _, st := range steps {
		if err := s.SetKeys(st.current, st.older...); err != nil {
			t.Fatalf("%s: SetKeys = %v", st.name, err)
		}
		if id, ok := s.Sealing(); ok != st.current.ok || ok && id != st.current.ID() {
			t.Errorf("%s: Sealing = %d, %v; want %d, %v", st.name, id, ok, st.current.ID(), st.current.ok)
		}
		if st.write != (keystore.Key{}) {
			store(t, s, st.write, answer())
			if id, sealed := innerID(st.write); sealed != st.sealed || id != st.wantID {
				t.Errorf("%s: the new record sealed %v with key id %d; want %v, %d", st.name, sealed, id, st.sealed, st.wantID)
			}
		}
		for _, k := range st.opens {
			if got, err := replay(t, s, k); err != nil || !reflect.DeepEqual(got, answer()) {
				t.Errorf("%s: replay of %x = %+v, %v; want the answer", st.name, k[:4], got, err)
			}
		}
		for _, k := range st.refused {
			if _, err := replay(t, s, k); !errors.Is(err, ErrUnsealable) {
				t.Errorf("%s: replay of %x = %v; want ErrUnsealable", st.name, k[:4], err)
			}
		}
	}
	// A Store that never had a key (a replica started without one, or a
	// process restarted after sealing was turned off) refuses an answer
	// another sealed: never its ciphertext as the body.
	fresh, err := Wrap(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replay(t, fresh, sealedA); !errors.Is(err, ErrUnsealable) {
		t.Errorf("a Store without keys: replay of an answer sealed with A = %v; want ErrUnsealable", err)
	}
	if got, err := replay(t, fresh, inClear); err != nil || !reflect.DeepEqual(got, answer()) {
		t.Errorf("a Store without keys: replay of an answer stored in clear = %+v, %v; want the answer", got, err)
	}
	if err := s.SetKeys(ka, Key{}); err == nil {
		t.Error("SetKeys with a zero older key = nil; want an error")
	}
	if id, ok := s.Sealing(); !ok || id != ka.ID() {
		t.Errorf("after a refused SetKeys, Sealing = %d, %v; want the running key", id, ok)
	}
}
