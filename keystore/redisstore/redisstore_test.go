package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/rediskey"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// testTimeout is generous: tests run in parallel under -race on small
// machines, and a dead server fails fast anyway (see client_test.go).
const testTimeout = 2 * time.Second

// clientOptions returns topo's options with the test timeout, or skips
// (see redistest).
func clientOptions(t testing.TB, topo redistest.Topology) ClientOptions {
	t.Helper()
	s := topo.Find(t)
	return ClientOptions{Addrs: s.Addrs, MasterName: s.MasterName, ClusterMode: s.Cluster, Timeout: testTimeout}
}

// newClient returns a client for topo, closed when the test ends.
func newClient(t testing.TB, topo redistest.Topology) redis.UniversalClient {
	t.Helper()
	c, err := NewClient(clientOptions(t, topo))
	if err != nil {
		t.Fatalf("NewClient = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newStore(t testing.TB, c redis.UniversalClient, prefix string) *Store {
	t.Helper()
	return newStoreOpts(t, c, Options{KeyPrefix: prefix})
}

// formats are the record formats a store writes; tests of what is written
// run in each.
var formats = []RecordFormat{FormatCompact, FormatHash}

func newStoreOpts(t testing.TB, c redis.UniversalClient, opts Options) *Store {
	t.Helper()
	s, err := New(c, opts)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// advance moves s's clock: the scripts add the offset to Redis's TIME.
func (s *Store) advance(d time.Duration) { s.offset.Add(d.Milliseconds()) }

func TestConformance(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		for _, f := range formats {
			t.Run(f.String(), func(t *testing.T) {
				prefix := redistest.Prefix(t)
				storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
					s := newStoreOpts(t, c, Options{KeyPrefix: prefix, RecordFormat: f})
					return s, s.advance
				})
			})
		}
	})
}

func reserveOpts(fp string) keystore.ReserveOptions {
	return keystore.ReserveOptions{
		Fingerprint: keystore.Fingerprint(keystore.NewKey("fp", fp)),
		Route:       "route_a",
		Lease:       storetest.Lease,
		Retention:   storetest.Retention,
	}
}

// Two processes share one Redis: two clients, 64 goroutines, one winner.
func TestRaceAcrossClients(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		prefix := redistest.Prefix(t)
		stores := []*Store{newStore(t, newClient(t, topo), prefix), newStore(t, newClient(t, topo), prefix)}
		for round := range 5 {
			k := storetest.NewTestKey(t)
			start := make(chan struct{})
			errs := make(chan error, 64)
			var wg sync.WaitGroup
			for i := range 64 {
				wg.Go(func() {
					<-start
					_, err := stores[i%2].Reserve(t.Context(), k, reserveOpts("a"))
					errs <- err
				})
			}
			close(start)
			wg.Wait()
			close(errs)
			wins, inFlight := 0, 0
			for err := range errs {
				switch {
				case err == nil:
					wins++
				case errors.Is(err, keystore.ErrInFlight):
					inFlight++
				default:
					t.Errorf("round %d: Reserve = %v", round, err)
				}
			}
			if wins != 1 || inFlight != 63 {
				t.Errorf("round %d: %d wins, %d in flight; want 1, 63", round, wins, inFlight)
			}
		}
	})
}

// After SCRIPT FLUSH (as on a newly promoted master), EVALSHA fails with
// NOSCRIPT and a store that runs scripts falls back to EVAL.
func TestScriptFlushFallback(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t), EvalScripts: true})
		ctx := t.Context()
		k := storetest.NewTestKey(t)
		res, err := s.Reserve(ctx, k, reserveOpts("a"))
		if err != nil {
			t.Fatalf("Reserve = %v", err)
		}
		scriptFlush(t, c)
		// The node that holds k (where the script runs).
		var node redis.Cmdable = c
		if cc, ok := c.(*redis.ClusterClient); ok {
			if node, err = cc.MasterForKey(ctx, s.key(k)); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := node.ScriptExists(ctx, s.lua().complete.script.Hash()).Result(); err != nil || got[0] {
			t.Fatalf("SCRIPT EXISTS after flush = %v, %v; want false", got, err)
		}
		if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 201}); err != nil {
			t.Fatalf("Complete after SCRIPT FLUSH = %v", err)
		}
		if got, err := node.ScriptExists(ctx, s.lua().complete.script.Hash()).Result(); err != nil || !got[0] {
			t.Errorf("SCRIPT EXISTS after the fallback = %v, %v; want true (EVAL loads it)", got, err)
		}
		if r, err := s.Reserve(ctx, k, reserveOpts("a")); err != nil || r.Response == nil || r.Response.Status != 201 {
			t.Errorf("replay = %+v, %v; want status 201", r, err)
		}
	})
}

// scriptFlush empties the script cache of every master of c.
func scriptFlush(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	each(t, c, func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
}

var keyName = regexp.MustCompile(`^\{[0-9a-f]{64}\}$`)

// Key names are the prefix and the hex hash: raw client input never reaches
// Redis.
func TestKeysAreHashes(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	s := newStore(t, c, prefix)
	ctx := t.Context()
	raw := "client-key-8f1e2d"
	k := keystore.NewKey("tenant", "Bearer secret-token", raw)
	if _, err := s.Reserve(ctx, k, reserveOpts("a")); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !keyName.MatchString(strings.TrimPrefix(keys[0], prefix)) || keys[0] != prefix+"{"+k.String()+"}" {
		t.Fatalf("keys = %q; want one key %q", keys, prefix+"{"+k.String()+"}")
	}
	v, err := c.Get(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(v, raw) || strings.Contains(v, "secret-token") {
		t.Errorf("record %q contains client input", v)
	}
}

// A value this package did not write is a distinct error, never "absent".
func TestCorruptValue(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	s := newStore(t, c, prefix)
	ctx := t.Context()
	// A compact record in flight, and a copy with byte i set to b.
	held := storetest.NewTestKey(t)
	if _, err := s.Reserve(ctx, held, reserveOpts("a")); err != nil {
		t.Fatal(err)
	}
	inFlight, err := c.Get(ctx, s.key(held)).Result()
	if err != nil || !strings.HasPrefix(inFlight, "igr2") {
		t.Fatalf("compact record = %q, %v", inFlight, err)
	}
	withByte := func(v string, i int, b byte) string {
		p := []byte(v)
		p[i] = b
		return string(p)
	}
	for _, tc := range []struct {
		name  string
		write func(key string) error
	}{
		{"string", func(key string) error { return c.Set(ctx, key, "garbage", time.Minute).Err() }},
		{"list", func(key string) error { return c.RPush(ctx, key, "x").Err() }},
		{"foreign hash", func(key string) error { return c.HSet(ctx, key, "session", "abc").Err() }},
		{"future format", func(key string) error { return c.HSet(ctx, key, "v", "2", "st", "1").Err() }},
		{"compact, cut short", func(key string) error { return c.Set(ctx, key, inFlight[:30], time.Minute).Err() }},
		{"compact, future magic", func(key string) error { return c.Set(ctx, key, "igr3"+inFlight[4:], time.Minute).Err() }},
		{"compact, bad state", func(key string) error { return c.Set(ctx, key, withByte(inFlight, 4, 9), time.Minute).Err() }},
		{"compact, completed without an answer", func(key string) error {
			return c.Set(ctx, key, withByte(inFlight, 4, 2), time.Minute).Err()
		}},
		{"bad state", func(key string) error {
			return c.HSet(ctx, key, "v", "1", "st", "9", "fp", strings.Repeat("x", 32), "rt", "r", "tk", "1", "cl", "1", "le", "1", "ex", "99999999999999").Err()
		}},
		{"expires before it was claimed", func(key string) error {
			return c.HSet(ctx, key, "v", "1", "st", "2", "fp", strings.Repeat("x", 32), "rt", "r", "tk", "1", "cl", "99999999999999", "le", "0", "ex", "5", "ans", "x").Err()
		}},
		{"bad token", func(key string) error {
			return c.HSet(ctx, key, "v", "1", "st", "1", "fp", strings.Repeat("x", 32), "rt", "r", "tk", "1e3", "cl", "1", "le", "1", "ex", "99999999999999").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := storetest.NewTestKey(t)
			if err := tc.write(s.key(k)); err != nil {
				t.Fatal(err)
			}
			check := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("%s = %v; want ErrCorrupt", op, err)
				}
			}
			_, err := s.Reserve(ctx, k, reserveOpts("a"))
			check("Reserve", err)
			_, err = s.Get(ctx, k)
			check("Get", err)
			check("Complete", s.Complete(ctx, k, 1, &keystore.Response{Status: 200}))
			check("Release", s.Release(ctx, k, 1))
			_, err = s.Renew(ctx, k, 1, time.Second)
			check("Renew", err)
			check("ForceRelease", s.ForceRelease(ctx, k))
			check("ForceComplete", s.ForceComplete(ctx, k, &keystore.Response{Status: 200}))
			if typ, _ := c.Type(ctx, s.key(k)).Result(); typ == "none" {
				t.Errorf("the foreign value was deleted")
			}
		})
	}
	t.Run("bad answer", func(t *testing.T) {
		k := storetest.NewTestKey(t)
		res, err := s.Reserve(ctx, k, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		resp := &keystore.Response{Status: 200, Body: []byte("ok")}
		if err := s.Complete(ctx, k, res.Token, resp); err != nil {
			t.Fatal(err)
		}
		// A compact record ends with its answer.
		v, err := c.Get(ctx, s.key(k)).Result()
		enc := string(keystore.EncodeResponse(resp))
		if err != nil || !strings.HasSuffix(v, enc) {
			t.Fatalf("record = %q, %v; want it to end with the answer %q", v, err, enc)
		}
		if err := c.Set(ctx, s.key(k), strings.TrimSuffix(v, enc)+"\x01\xff\xff", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(ctx, k, reserveOpts("a")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("replay of a bad answer = %v; want ErrCorrupt", err)
		}
		if _, err := s.Get(ctx, k); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get of a bad answer = %v; want ErrCorrupt", err)
		}
	})
	t.Run("listing", func(t *testing.T) {
		// Damaged values beside a good claim, written straight into Redis
		// under the store's key layout: the listing skips and counts them
		// (issue 28, item 8) and still lists the good claim.
		prefix := redistest.Prefix(t)
		s := newStore(t, c, prefix)
		good := storetest.NewTestKey(t)
		if _, err := s.Reserve(ctx, good, reserveOpts("a")); err != nil {
			t.Fatal(err)
		}
		var names []string
		for i, write := range []func(key string) error{
			func(key string) error { return c.Set(ctx, key, "garbage", time.Minute).Err() },
			func(key string) error { return c.RPush(ctx, key, "x").Err() },
			func(key string) error { return c.Set(ctx, key, inFlight[:30], time.Minute).Err() },
			func(key string) error { return c.HSet(ctx, key, "v", "2", "st", "1").Err() },
		} {
			key := s.key(keystore.NewKey(fmt.Sprint("damaged-", i)))
			if err := write(key); err != nil {
				t.Fatal(err)
			}
			names = append(names, key)
		}
		notAKey := prefix + "{not-a-store-key}"
		if err := c.Set(ctx, notAKey, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		names = append(names, notAKey)
		// The TLS storage's keys share the prefix and a brace
		// (rediskey.TLSTag): neither records nor damaged.
		for _, k := range []string{"index", "v:0123", "lock:4567"} {
			if err := c.Set(ctx, prefix+rediskey.TLSTag+k, "x", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
		}
		recs, err := s.InFlight(ctx, 0, 10)
		var damaged *keystore.DamagedError
		if !errors.As(err, &damaged) || !errors.Is(err, ErrCorrupt) || damaged.Count != len(names) {
			t.Fatalf("InFlight over %d damaged values = %v; want a DamagedError counting them", len(names), err)
		}
		slices.Sort(names)
		if got := slices.Sorted(slices.Values(damaged.Names)); !slices.Equal(got, names) {
			t.Errorf("damaged names = %q; want %q", got, names)
		}
		if len(recs) != 1 || recs[0].Key != good || recs[0].State != keystore.StateInFlight {
			t.Errorf("InFlight = %+v; want the good claim alone", recs)
		}
		for _, name := range names {
			if typ, _ := c.Type(ctx, name).Result(); typ == "none" {
				t.Errorf("the listing deleted the damaged value %s", name)
			}
		}
	})
}

// Tokens never repeat for a key, even when the record vanished (expired, or
// lost in a failover).
func TestTokensNeverRepeat(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	k := storetest.NewTestKey(t)
	var last uint64
	for i := range 5 {
		res, err := s.Reserve(ctx, k, reserveOpts("a"))
		if err != nil {
			t.Fatalf("Reserve #%d = %v", i, err)
		}
		if res.Token <= last {
			t.Fatalf("Reserve #%d token %d; want > %d", i, res.Token, last)
		}
		last = res.Token
		if rec, err := s.Get(ctx, k); err != nil || rec.Token != res.Token || rec.State != keystore.StateInFlight {
			t.Fatalf("Get = %+v, %v; want in flight with token %d", rec, err, res.Token)
		}
		switch i % 3 {
		case 0:
			err = s.Release(ctx, k, res.Token) // tombstone keeps the token
		case 1:
			err = c.Del(ctx, s.key(k)).Err() // the record vanishes
		case 2:
			s.advance(storetest.Lease + time.Second) // taken over next
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Every script is safe to run twice with the same op nonce, as go-redis may
// resend a command after a network error.
func TestScriptsSafeToResend(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	k := storetest.NewTestKey(t)
	fp := keystore.Fingerprint(keystore.NewKey("fp", "a"))
	twice := func(script lua, args ...any) [2][]any {
		var out [2][]any
		for i := range out {
			c := s.newCall(k)
			c.argv = append(c.argv, args...)
			code, rest, err := s.run(ctx, "test", script, c)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = append([]any{code}, rest...)
		}
		return out
	}
	id := keystore.NewClaimID()
	r := twice(s.lua().reserve, string(fp[:]), "r", int64(2000), int64(10000), "op-1", string(id[:]), int64(1))
	if r[0][0] != int64(codeClaim) || r[1][0] != int64(codeClaim) || r[0][1] != r[1][1] {
		t.Fatalf("reserve twice = %v; want the same claim twice", r)
	}
	tok := r[0][1].(int64)
	tokS := strconv.FormatInt(tok, 10)
	cmp := twice(s.lua().complete, tokS, keystore.EncodeResponse(&keystore.Response{Status: 200}), "op-2", "0")
	if cmp[0][0] != int64(codeOK) || cmp[1][0] != int64(codeOK) {
		t.Errorf("complete twice = %v; want OK twice", cmp)
	}
	if err := s.Complete(ctx, k, uint64(tok), &keystore.Response{Status: 200}); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("another Complete = %v; want ErrLeaseLost", err)
	}
}

// A takeover is a new claim: the record lives for retention from it.
func TestTakeoverExtendsRetention(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	k := storetest.NewTestKey(t)
	if _, err := s.Reserve(ctx, k, reserveOpts("a")); err != nil {
		t.Fatal(err)
	}
	first, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	s.advance(storetest.Lease + time.Second)
	res, err := s.Reserve(ctx, k, reserveOpts("a"))
	if err != nil || !res.Takeover {
		t.Fatalf("Reserve after the lease = %+v, %v; want a takeover", res, err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.Expires.Sub(rec.Claimed); got != storetest.Retention || !rec.Expires.After(first.Expires) {
		t.Errorf("after takeover: expires %v, claimed %v (%v); want retention %v from the takeover, after %v",
			rec.Expires, rec.Claimed, got, storetest.Retention, first.Expires)
	}
	if ttl, err := c.PTTL(ctx, s.key(k)).Result(); err != nil || ttl <= storetest.Retention-time.Second {
		t.Errorf("PTTL = %v, %v; want about %v", ttl, err, storetest.Retention)
	}
}

// InFlight lists claims on every master, oldest first.
func TestInFlightAcrossMasters(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		s := newStore(t, c, redistest.Prefix(t))
		ctx := t.Context()
		want := map[keystore.Key]bool{}
		for i := range 30 {
			k := storetest.NewTestKey(t)
			res, err := s.Reserve(ctx, k, reserveOpts("a"))
			if err != nil {
				t.Fatal(err)
			}
			switch i % 3 {
			case 0:
				want[k] = true
			case 1:
				err = s.Complete(ctx, k, res.Token, &keystore.Response{Status: 200, Header: http.Header{}})
			case 2:
				err = s.Release(ctx, k, res.Token)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		s.advance(time.Second)
		fresh := storetest.NewTestKey(t)
		if _, err := s.Reserve(ctx, fresh, reserveOpts("a")); err != nil {
			t.Fatal(err)
		}
		list, err := s.InFlight(ctx, 500*time.Millisecond, 0)
		if err != nil {
			t.Fatalf("InFlight = %v", err)
		}
		if len(list) != len(want) {
			t.Errorf("InFlight = %d records; want %d", len(list), len(want))
		}
		for i, rec := range list {
			if !want[rec.Key] || rec.State != keystore.StateInFlight || rec.Route != "route_a" || rec.Token == 0 || rec.LeaseEnd.IsZero() {
				t.Errorf("InFlight[%d] = %+v; want one of the stuck claims", i, rec)
			}
			if i > 0 && rec.Claimed.Before(list[i-1].Claimed) {
				t.Errorf("InFlight not sorted oldest first at %d", i)
			}
		}
		if list, err := s.InFlight(ctx, 500*time.Millisecond, 4); err != nil || len(list) != 4 {
			t.Errorf("InFlight(limit 4) = %d records, %v; want 4", len(list), err)
		}
	})
}

func BenchmarkStore(b *testing.B) {
	for _, topo := range []redistest.Topology{redistest.Standalone, redistest.Cluster} {
		b.Run(topo.String(), func(b *testing.B) {
			c := newClient(b, topo)
			prefix := redistest.Prefix(b)
			storetest.Bench(b, func(b *testing.B) keystore.Store { return newStore(b, c, prefix) })
		})
	}
}
