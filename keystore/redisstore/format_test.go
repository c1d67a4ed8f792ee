package redisstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// Replicas that write different record formats share one Redis while
// store.redis.record_format changes: each reads, fences and carries on the
// other's records, tombstones included, and rewrites them in its own.
func TestFormatsReadEachOther(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	for _, wf := range formats {
		for _, rf := range formats {
			t.Run(fmt.Sprintf("%s then %s", wf, rf), func(t *testing.T) {
				w := newStoreOpts(t, c, Options{KeyPrefix: prefix, RecordFormat: wf})
				r := newStoreOpts(t, c, Options{KeyPrefix: prefix, RecordFormat: rf})
				ctx := t.Context()
				typeOf := func(k keystore.Key) string {
					t.Helper()
					ty, err := c.Type(ctx, r.key(k)).Result()
					if err != nil {
						t.Fatal(err)
					}
					return ty
				}
				want := map[RecordFormat]string{FormatCompact: "string", FormatHash: "hash"}

				// A claim in flight: held, renewed and completed across formats.
				k := storetest.NewTestKey(t)
				res, err := w.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
				if err != nil {
					t.Fatal(err)
				}
				if got := typeOf(k); got != want[wf] {
					t.Fatalf("written as a %s; want a %s", got, want[wf])
				}
				if rec, err := r.Get(ctx, k); err != nil || rec.State != keystore.StateInFlight || rec.Token != res.Token || rec.ClaimID != res.Claim.ID || rec.Route != "route_a" {
					t.Fatalf("Get = %+v, %v; want the claim in flight", rec, err)
				}
				if _, err := r.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID())); !errors.Is(err, keystore.ErrInFlight) {
					t.Fatalf("another Reserve = %v; want ErrInFlight", err)
				}
				if _, err := r.Renew(ctx, k, res.Token, time.Minute); err != nil {
					t.Fatalf("Renew = %v", err)
				}
				stranger := res.Claim
				stranger.ID = keystore.NewClaimID()
				if _, err := r.CompleteClaim(ctx, k, stranger, &keystore.Response{Status: 500}); !errors.Is(err, keystore.ErrLeaseLost) {
					t.Fatalf("CompleteClaim by another id = %v; want ErrLeaseLost", err)
				}
				if how, err := r.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201, Body: []byte("made")}); err != nil || how != keystore.Completed {
					t.Fatalf("CompleteClaim = %v, %v; want completed", how, err)
				}
				if got := typeOf(k); got != want[rf] {
					t.Errorf("rewritten as a %s; want a %s", got, want[rf])
				}
				for _, s := range []*Store{w, r} {
					got, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
					if err != nil || got.Response == nil || got.Response.Status != 201 || string(got.Response.Body) != "made" {
						t.Errorf("%s replay = %+v, %v; want the answer", s.lua().format, got, err)
					}
				}

				// A claim released by its id: the tombstone fences the id in
				// either format, and the next claim's token is higher.
				k = storetest.NewTestKey(t)
				id := keystore.NewClaimID()
				res, err = w.Reserve(ctx, k, claimOpts("a", id))
				if err != nil {
					t.Fatal(err)
				}
				if err := w.ReleaseClaim(ctx, k, id, time.Minute); err != nil {
					t.Fatal(err)
				}
				if _, err := r.Reserve(ctx, k, claimOpts("a", id)); !errors.Is(err, keystore.ErrLeaseLost) {
					t.Errorf("Reserve with the released id = %v; want ErrLeaseLost", err)
				}
				next, err := r.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
				if err != nil || next.Token <= res.Token {
					t.Errorf("next claim = %+v, %v; want a token above %d", next, err, res.Token)
				}
				if _, err := w.Reserve(ctx, k, claimOpts("a", id)); !errors.Is(err, keystore.ErrLeaseLost) {
					t.Errorf("Reserve with the released id, after the rewrite = %v; want ErrLeaseLost", err)
				}

				// A tombstone alone (the claim's reply was lost before it
				// arrived), then the claim.
				k = storetest.NewTestKey(t)
				id = keystore.NewClaimID()
				if err := w.ReleaseClaim(ctx, k, id, time.Minute); err != nil {
					t.Fatal(err)
				}
				if rec, err := r.Get(ctx, k); err != nil || rec.State != keystore.StateReleased {
					t.Errorf("Get of a tombstone = %+v, %v; want released", rec, err)
				}
				if _, err := r.Reserve(ctx, k, claimOpts("a", id)); !errors.Is(err, keystore.ErrLeaseLost) {
					t.Errorf("the late claim = %v; want ErrLeaseLost", err)
				}
			})
		}
	}
}

// SetRecordFormat switches what the store writes from its next call on.
func TestSetRecordFormat(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t), RecordFormat: FormatHash})
	ctx := t.Context()
	for _, tc := range []struct {
		f    RecordFormat
		want string
	}{{FormatHash, "hash"}, {FormatCompact, "string"}, {FormatHash, "hash"}} {
		if err := s.SetRecordFormat(tc.f); err != nil {
			t.Fatal(err)
		}
		k := storetest.NewTestKey(t)
		if _, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID())); err != nil {
			t.Fatal(err)
		}
		if got := c.Type(ctx, s.key(k)).Val(); got != tc.want {
			t.Errorf("%s: wrote a %s; want a %s", tc.f, got, tc.want)
		}
	}
	if err := s.SetRecordFormat(RecordFormat(7)); err == nil {
		t.Error("SetRecordFormat(7) = nil; want an error")
	}
	if _, err := New(c, Options{RecordFormat: RecordFormat(-1)}); err == nil {
		t.Error("New with an unknown format = nil error")
	}
	if got := s.lua().format; got != FormatHash {
		t.Errorf("after a refused format, the store writes %s; want hash", got)
	}
}

// Every truncation of a compact record (one with a tombstone and an
// answer) and every single byte changed in its header reads as a record
// or as ErrCorrupt, never as a script error or an absent record; except a
// changed expiry that still reads as a plausible past one, which is an
// expired record (no layout can tell).
func TestCompactRecordDamage(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	k := storetest.NewTestKey(t)
	gone := keystore.NewClaimID()
	if err := s.ReleaseClaim(ctx, k, gone, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201, Body: []byte("made")}); err != nil {
		t.Fatal(err)
	}
	good, err := c.Get(ctx, s.key(k)).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The expiry's 8 bytes: after the magic (4), state, fingerprint version
	// and takeover flag (1 each), token, claimed and lease end (8 each).
	const exAt = 4 + 3 + 3*8
	check := func(what, v string, expiry bool) {
		t.Helper()
		if err := c.Set(ctx, s.key(k), v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, k)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("%s: Get = %v; want a record or ErrCorrupt", what, err)
		}
		if errors.Is(err, keystore.ErrNotFound) && !expiry {
			t.Errorf("%s: Get = ErrNotFound; a damaged record is never absent", what)
		}
		_, err = s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, keystore.ErrInFlight) && !errors.Is(err, keystore.ErrFingerprintMismatch) && !errors.Is(err, keystore.ErrLeaseLost) {
			var me *keystore.MismatchError
			if !errors.As(err, &me) {
				t.Errorf("%s: Reserve = %v; want an answer or ErrCorrupt", what, err)
			}
		}
	}
	for n := range len(good) {
		check(fmt.Sprintf("cut to %d bytes", n), good[:n], false)
	}
	// The header: the fixed part up to the route's length.
	for i := range min(len(good), 80) {
		for _, b := range []byte{0x00, 0xff, good[i] ^ 0x01} {
			v := []byte(good)
			v[i] = b
			check(fmt.Sprintf("byte %d set to %#x", i, b), string(v), i >= exAt && i < exAt+8)
		}
	}
}

// BenchmarkRecordFormats measures what a keyed first write costs Redis in
// each format, its scripts run as functions (FCALL) and with EVALSHA: the
// CPU Redis reports for its two calls (INFO commandstats, FCALL and
// EVALSHA), the server's whole CPU per write (INFO cpu, its network
// included), and the memory of the completed record and of a claim in
// flight (MEMORY USAGE), with a 400-byte answer body. Run it alone: it
// resets Redis's command statistics.
//
//	go test ./keystore/redisstore -run '^$' -bench RecordFormats
func BenchmarkRecordFormats(b *testing.B) {
	c := newClient(b, redistest.Standalone)
	ctx := b.Context()
	resp := &keystore.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(strings.Repeat("b", 400))}
	// calls is the µs Redis counted in FCALL and EVALSHA.
	calls := func() float64 {
		b.Helper()
		stats, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			b.Fatal(err)
		}
		us := commandUsec(b, stats)
		return us["fcall"] + us["evalsha"]
	}
	// cpu is the server's CPU time in µs, user and system (serverCPU).
	cpu := func() float64 {
		user, sys := serverCPU(b, c)
		return user + sys
	}
	for _, f := range formats {
		for _, eval := range []bool{false, true} {
			name := f.String() + "/functions"
			if eval {
				name = f.String() + "/scripts"
			}
			b.Run(name, func(b *testing.B) {
				s := newStoreOpts(b, c, Options{KeyPrefix: redistest.Prefix(b), RecordFormat: f, DirectCalls: true, EvalScripts: eval})
				if err := s.LoadScripts(ctx); err != nil || s.Functions() == eval {
					b.Fatalf("LoadScripts = %v, Functions = %v", err, s.Functions())
				}
				var k keystore.Key
				if err := c.ConfigResetStat(ctx).Err(); err != nil {
					b.Fatal(err)
				}
				cpu0 := cpu()
				for b.Loop() {
					k = storetest.NewTestKey(b)
					res, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
					if err != nil {
						b.Fatal(err)
					}
					if _, err := s.CompleteClaim(ctx, k, res.Claim, resp); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(calls()/float64(b.N), "redis-µs/write")
				b.ReportMetric((cpu()-cpu0)/float64(b.N), "server-µs/write")
				b.ReportMetric(float64(c.MemoryUsage(ctx, s.key(k), 0).Val()), "redis-B/record")
				// A claim in flight, outside the timed loop.
				k = storetest.NewTestKey(b)
				if _, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID())); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(c.MemoryUsage(ctx, s.key(k), 0).Val()), "redis-B/claim")
			})
		}
	}
}
