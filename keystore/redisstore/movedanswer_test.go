package redisstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// bigAnswer is an answer of about 4.5 KB, the size that made passing it
// through Lua costly (issue 31), over movedMinBody.
var bigAnswer = &keystore.Response{
	Status: 201,
	Header: http.Header{"Content-Type": {"application/json"}},
	Body:   bytes.Repeat([]byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","amount":1099},`), 90),
}

// newPrefixed returns a client of topo and a store on it with a key prefix
// of its own.
func newPrefixed(t *testing.T, topo redistest.Topology) (redis.UniversalClient, string, *Store) {
	t.Helper()
	c := newClient(t, topo)
	prefix := redistest.Prefix(t)
	return c, prefix, newStore(t, c, prefix)
}

// storeKeys returns every key matching pattern on every master.
func storeKeys(t *testing.T, c redis.UniversalClient, pattern string) []string {
	t.Helper()
	var (
		mu   sync.Mutex
		keys []string
	)
	scan := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, pattern, 100).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), scan)
	} else {
		err = scan(t.Context(), c.(*redis.Client))
	}
	if err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}

// noScratchKeys fails t if any key under prefix is not a record's.
func noScratchKeys(t *testing.T, c redis.UniversalClient, prefix string) {
	t.Helper()
	for _, key := range storeKeys(t, c, globEscape(prefix)+"*") {
		if !keyName.MatchString(strings.TrimPrefix(key, prefix)) {
			t.Errorf("key %q left behind; want only records", key)
		}
	}
}

// A record completed with the answer moved from its scratch key is byte
// for byte the one complete_claim.lua writes with the answer in its
// arguments, with the same expiry and the same memory: completing a claim
// in flight, and recreating a vanished record.
func TestMovedAnswerSameRecord(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c, prefix, s := newPrefixed(t, topo)
		ctx := t.Context()
		op := [8]byte{'o', 'p', '-', 'f', 'i', 'x', 'e', 'd'}
		for _, recreate := range []bool{false, true} {
			t.Run(fmt.Sprintf("recreate=%v", recreate), func(t *testing.T) {
				moved, classic := storetest.NewTestKey(t), storetest.NewTestKey(t)
				var claim keystore.Claim
				want := keystore.Completed
				if recreate {
					want = keystore.Recreated
					claim = keystore.Claim{ID: keystore.NewClaimID(), Token: 1234567, Route: "route_a",
						Fingerprint: keystore.Fingerprint(keystore.NewKey("fp", "a")), FingerprintVersion: 2,
						Claimed: time.Now(), Expires: time.Now().Add(time.Hour)}
				} else {
					res, err := s.Reserve(ctx, moved, claimOpts("a", keystore.NewClaimID()))
					if err != nil {
						t.Fatal(err)
					}
					claim = res.Claim
					// The same record in flight at the other key.
					v, err := c.Get(ctx, s.key(moved)).Result()
					if err != nil {
						t.Fatal(err)
					}
					if err := c.Set(ctx, s.key(classic), v, time.Hour).Err(); err != nil {
						t.Fatal(err)
					}
				}
				for _, tc := range []struct {
					k    keystore.Key
					move bool
				}{{moved, true}, {classic, false}} {
					how, gotMove, err := s.completeClaim(ctx, tc.k, claim, bigAnswer, op, s.lua(), tc.move)
					if err != nil || how != want || gotMove != tc.move {
						t.Fatalf("completeClaim(move %v) = %v, moved %v, %v; want %v, moved %v", tc.move, how, gotMove, err, want, tc.move)
					}
				}
				a, err := c.Get(ctx, s.key(moved)).Result()
				if err != nil {
					t.Fatal(err)
				}
				b, err := c.Get(ctx, s.key(classic)).Result()
				if err != nil {
					t.Fatal(err)
				}
				if a != b || !strings.HasPrefix(a, "igr2") || !strings.HasSuffix(a, string(keystore.EncodeResponse(bigAnswer))) {
					t.Errorf("moved record (%d bytes) != classic record (%d bytes), or not igr2 + header + answer:\n%q\n%q", len(a), len(b), a[:min(len(a), 140)], b[:min(len(b), 140)])
				}
				ta, tb := c.PTTL(ctx, s.key(moved)).Val(), c.PTTL(ctx, s.key(classic)).Val()
				if ta <= 0 || tb <= 0 || (ta-tb).Abs() > time.Second {
					t.Errorf("PTTL moved %v, classic %v; want the same", ta, tb)
				}
				ma, mb := c.MemoryUsage(ctx, s.key(moved)).Val(), c.MemoryUsage(ctx, s.key(classic)).Val()
				if ma != mb {
					t.Errorf("MEMORY USAGE moved %d, classic %d; want the same", ma, mb)
				}
				replayed(t, s, moved, claim)
			})
		}
		noScratchKeys(t, c, prefix)
	})
}

// Every outcome of complete_claim_moved.lua leaves no scratch key behind;
// the cases it cannot serve fall back to complete_claim.lua with the same
// result.
func TestMovedAnswerFallbacks(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		for _, tc := range []struct {
			name string
			// setup prepares k and returns the claim to complete.
			setup func(t *testing.T, s *Store, k keystore.Key) keystore.Claim
			// moved is whether the answer is moved; want the completion or
			// err the error.
			moved bool
			want  keystore.Completion
			err   error
		}{
			{"in flight", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				return reserveClaim(t, s, k, keystore.NewClaimID())
			}, true, keystore.Completed, nil},
			{"already completed", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				cl := reserveClaim(t, s, k, keystore.NewClaimID())
				if _, err := s.CompleteClaim(t.Context(), k, cl, bigAnswer); err != nil {
					t.Fatal(err)
				}
				return cl
			}, true, keystore.Completed, nil},
			{"vanished", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				return vanishedClaim(time.Hour)
			}, true, keystore.Recreated, nil},
			{"vanished and expired", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				return vanishedClaim(-time.Second)
			}, true, keystore.Expired, nil},
			{"lost claim", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				cl := reserveClaim(t, s, k, keystore.NewClaimID())
				cl.ID = keystore.NewClaimID()
				return cl
			}, true, 0, keystore.ErrLeaseLost},
			{"revoked claim, record vanished", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				cl := vanishedClaim(time.Hour)
				if err := s.ReleaseClaim(t.Context(), k, cl.ID, time.Minute); err != nil {
					t.Fatal(err)
				}
				return cl
			}, true, 0, keystore.ErrLeaseLost},
			{"corrupt record", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				if err := c.Set(t.Context(), s.key(k), "not a record", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				return vanishedClaim(time.Hour)
			}, true, 0, ErrCorrupt},
			{"live tombstone", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				first := keystore.NewClaimID()
				reserveClaim(t, s, k, first)
				if err := s.ReleaseClaim(t.Context(), k, first, time.Minute); err != nil {
					t.Fatal(err)
				}
				return reserveClaim(t, s, k, keystore.NewClaimID())
			}, false, keystore.Completed, nil},
			{"expired tombstone", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				first := keystore.NewClaimID()
				reserveClaim(t, s, k, first)
				if err := s.ReleaseClaim(t.Context(), k, first, time.Second); err != nil {
					t.Fatal(err)
				}
				cl := reserveClaim(t, s, k, keystore.NewClaimID())
				s.advance(2 * time.Second) // the tombstone ends, the lease holds
				return cl
			}, true, keystore.Completed, nil},
			{"vanished, stale record with a live tombstone", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				first := keystore.NewClaimID()
				reserveClaim(t, s, k, first)
				if err := s.ReleaseClaim(t.Context(), k, first, 3*storetest.Retention); err != nil {
					t.Fatal(err)
				}
				s.advance(2 * storetest.Retention) // the record expires, its tombstone lives
				cl := vanishedClaim(time.Hour)
				cl.Expires = cl.Expires.Add(2 * storetest.Retention)
				return cl
			}, false, keystore.Recreated, nil},
			{"route of another length", func(t *testing.T, s *Store, k keystore.Key) keystore.Claim {
				cl := reserveClaim(t, s, k, keystore.NewClaimID())
				cl.Route = "a route longer than the record's"
				return cl
			}, false, keystore.Completed, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				prefix := redistest.Prefix(t)
				s := newStore(t, c, prefix)
				k := storetest.NewTestKey(t)
				claim := tc.setup(t, s, k)
				how, moved, err := s.completeClaim(t.Context(), k, claim, bigAnswer, newOp(), s.lua(), true)
				if how != tc.want || moved != tc.moved || !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
					t.Errorf("completeClaim = %v, moved %v, %v; want %v, moved %v, %v", how, moved, err, tc.want, tc.moved, tc.err)
				}
				if tc.err == nil && tc.want != keystore.Expired {
					replayed(t, s, k, claim)
				}
				noScratchKeys(t, c, prefix)
			})
		}
	})
}

// reserveClaim reserves k with claim id id.
func reserveClaim(t *testing.T, s *Store, k keystore.Key, id keystore.ClaimID) keystore.Claim {
	t.Helper()
	res, err := s.Reserve(t.Context(), k, claimOpts("a", id))
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	return res.Claim
}

// vanishedClaim is a claim whose record is gone, expiring in d.
func vanishedClaim(d time.Duration) keystore.Claim {
	return keystore.Claim{ID: keystore.NewClaimID(), Token: 99, Route: "route_a",
		Fingerprint: keystore.Fingerprint(keystore.NewKey("fp", "a")), FingerprintVersion: 2,
		Claimed: time.Now().Add(-time.Minute), Expires: time.Now().Add(d)}
}

// replayed checks that k replays bigAnswer.
func replayed(t *testing.T, s *Store, k keystore.Key, c keystore.Claim) {
	t.Helper()
	o := claimOpts("a", keystore.NewClaimID())
	o.Fingerprint, o.FingerprintVersion = c.Fingerprint, c.FingerprintVersion
	r, err := s.Reserve(t.Context(), k, o)
	if err != nil || r.Response == nil || !bytes.Equal(r.Response.Body, bigAnswer.Body) {
		t.Errorf("replay = response %v, %v; want the answer", r.Response != nil, err)
	}
}

// The script itself refuses what the Go side never sends it, and deletes
// the scratch key: the hash format, and a scratch key no longer than its
// placeholder (gone, or without an answer).
func TestMovedAnswerScriptRefuses(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	s := newStore(t, c, prefix)
	for _, tc := range []struct {
		name   string
		format RecordFormat
		short  bool
	}{
		{"hash format", FormatHash, false},
		{"no answer after the placeholder", FormatCompact, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := storetest.NewTestKey(t)
			claim := reserveClaim(t, s, k, keystore.NewClaimID())
			before, err := c.Get(t.Context(), s.key(k)).Result()
			if err != nil {
				t.Fatal(err)
			}
			a, _ := s.completeClaimCall(t.Context(), k, claim, bigAnswer, newOp(), true)
			if tc.short {
				a.val = a.val[:headLen(len(claim.Route), 8, len(claim.ID))]
			}
			code, _, err := s.run(t.Context(), "test", formatScripts[tc.format].completeClaimMoved, a)
			if err != nil || code != codeNeedAnswer {
				t.Errorf("complete_claim_moved = %d, %v; want NEED_ANSWER (%d)", code, err, codeNeedAnswer)
			}
			if after := c.Get(t.Context(), s.key(k)).Val(); after != before {
				t.Errorf("record changed by a refusal: %q; was %q", after, before)
			}
			noScratchKeys(t, c, prefix)
		})
	}
}

// After SCRIPT FLUSH the SET has been done when EVALSHA fails with
// NOSCRIPT: the EVAL that follows still finds the scratch key and moves it.
func TestMovedAnswerScriptFlush(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c, prefix, s := newPrefixed(t, topo)
		ctx := t.Context()
		k := storetest.NewTestKey(t)
		claim := reserveClaim(t, s, k, keystore.NewClaimID())
		scriptFlush(t, c)
		how, moved, err := s.completeClaim(ctx, k, claim, bigAnswer, newOp(), s.lua(), true)
		if err != nil || how != keystore.Completed || !moved {
			t.Fatalf("completeClaim after SCRIPT FLUSH = %v, moved %v, %v; want Completed, moved", how, moved, err)
		}
		replayed(t, s, k, claim)
		noScratchKeys(t, c, prefix)
	})
}

// A scratch key whose script never ran (the connection failed between the
// SET and the EVALSHA) is in no listing, matches no record pattern, and
// shares its record's Cluster slot.
func TestScratchKeysNeverListed(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c, prefix, s := newPrefixed(t, topo)
		ctx := t.Context()
		k := storetest.NewTestKey(t)
		reserveClaim(t, s, k, keystore.NewClaimID())
		scratch := string(appendScratchKey(nil, prefix, s.key(k), newOp()))
		if err := c.Set(ctx, scratch, strings.Repeat("\x00", 120)+"an answer", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			got, err1 := cc.ClusterKeySlot(ctx, scratch).Result()
			want, err2 := cc.ClusterKeySlot(ctx, s.key(k)).Result()
			if err1 != nil || err2 != nil || got != want {
				t.Errorf("scratch key %q in slot %d (%v), its record in %d (%v)", scratch, got, err1, want, err2)
			}
		}
		recs, err := s.InFlight(ctx, 0, 0)
		if err != nil || len(recs) != 1 || recs[0].Key != k {
			t.Errorf("InFlight = %d records, %v; want the one record, no damaged key", len(recs), err)
		}
		if _, err := s.Unknown(ctx, 0); err != nil {
			t.Errorf("Unknown = %v; want no damaged key", err)
		}
		if keys := storeKeys(t, c, globEscape(prefix)+"{*"); len(keys) != 1 || keys[0] != s.key(k) {
			t.Errorf("SCAN MATCH %s{* = %q; want only the record", prefix, keys)
		}
	})
}

// Concurrent CompleteClaims share the pipeliner's batches: each SET goes
// with its own script, and each record holds its own answer.
func TestMovedAnswersPipelined(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c, prefix, s := newPrefixed(t, topo)
		const n = 64
		keys := make([]keystore.Key, n)
		claims := make([]keystore.Claim, n)
		for i := range keys {
			keys[i] = storetest.NewTestKey(t)
			claims[i] = reserveClaim(t, s, keys[i], keystore.NewClaimID())
		}
		answer := func(i int) *keystore.Response {
			return &keystore.Response{Status: 200 + i, Body: bytes.Repeat([]byte{byte('a' + i%26)}, movedMinBody+i)}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				<-start
				how, err := s.CompleteClaim(t.Context(), keys[i], claims[i], answer(i))
				if err == nil && how != keystore.Completed {
					err = fmt.Errorf("completion %v", how)
				}
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("CompleteClaim = %v; want Completed", err)
			}
		}
		for i, k := range keys {
			r, err := s.Reserve(t.Context(), k, claimOpts("a", keystore.NewClaimID()))
			if want := answer(i); err != nil || r.Response == nil || r.Response.Status != want.Status || !bytes.Equal(r.Response.Body, want.Body) {
				t.Errorf("replay %d = %+v, %v; want status %d and its body", i, r.Response != nil, err, want.Status)
			}
		}
		noScratchKeys(t, c, prefix)
	})
}

// While the record's Cluster slot migrates, the new scratch key goes to
// the slot's new node (ASK) and the script, whose record is still on the
// old one, is refused with TRYAGAIN: the answer goes the classic way.
// (Not parallel: it migrates a slot of the shared test cluster for a
// moment.)
func TestMovedAnswerSlotMigrating(t *testing.T) {
	c := newClient(t, redistest.Cluster)
	cc := c.(*redis.ClusterClient)
	prefix := redistest.Prefix(t)
	s := newStore(t, c, prefix)
	ctx := t.Context()
	k := storetest.NewTestKey(t)
	claim := reserveClaim(t, s, k, keystore.NewClaimID())
	slot, err := cc.ClusterKeySlot(ctx, s.key(k)).Result()
	if err != nil {
		t.Fatal(err)
	}
	source, err := cc.MasterForKey(ctx, s.key(k))
	if err != nil {
		t.Fatal(err)
	}
	var target *redis.Client
	var mu sync.Mutex
	err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		if n.Options().Addr != source.Options().Addr && target == nil {
			target = n
		}
		return nil
	})
	if err != nil || target == nil {
		t.Fatalf("another master: %v", err)
	}
	sourceID, err1 := source.ClusterMyID(ctx).Result()
	targetID, err2 := target.ClusterMyID(ctx).Result()
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	stable := func() {
		for _, n := range []*redis.Client{source, target} {
			if err := n.Do(context.Background(), "cluster", "setslot", slot, "stable").Err(); err != nil {
				t.Errorf("CLUSTER SETSLOT %d STABLE: %v", slot, err)
			}
		}
	}
	t.Cleanup(stable)
	if err := target.Do(ctx, "cluster", "setslot", slot, "importing", sourceID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := source.Do(ctx, "cluster", "setslot", slot, "migrating", targetID).Err(); err != nil {
		t.Fatal(err)
	}
	how, moved, err := s.completeClaim(ctx, k, claim, bigAnswer, newOp(), s.lua(), true)
	if err != nil || how != keystore.Completed || moved {
		t.Errorf("completeClaim while the slot migrates = %v, moved %v, %v; want Completed the classic way", how, moved, err)
	}
	// The scratch key that went to the new node: deleted there (it would
	// expire), before the slot is stable again.
	var scratch []string
	pipe := target.Pipeline()
	pipe.Do(ctx, "asking")
	keys := pipe.Keys(ctx, globEscape(prefix)+"answer:*")
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	scratch = keys.Val()
	if len(scratch) != 1 {
		t.Errorf("scratch keys on the new node = %q; want the one the SET left there", scratch)
	}
	for _, key := range scratch {
		pipe := target.Pipeline()
		pipe.Do(ctx, "asking")
		pipe.Del(ctx, key)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stable()
	replayed(t, s, k, claim)
	noScratchKeys(t, c, prefix)
}

// sendHook records what a client sends but its connections' handshakes:
// each Process as one round trip of one command, each pipeline as one
// round trip of its commands.
type sendHook struct {
	mu    sync.Mutex
	trips [][]string
}

func (h *sendHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}

func (h *sendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

func (h *sendHook) add(cmds ...redis.Cmder) {
	var names []string
	for _, c := range cmds {
		switch n := c.Name(); n {
		case "hello", "client", "auth", "select", "ping":
			// A new connection's handshake
		default:
			names = append(names, n)
		}
	}
	if names == nil {
		return
	}
	h.mu.Lock()
	h.trips = append(h.trips, names)
	h.mu.Unlock()
}

func (h *sendHook) take() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// A moved CompleteClaim is one round trip, the SET then the script, with
// the pipeliner and without; a fallback is a second, the classic script.
func TestMovedAnswerOneRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ direct, eval bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		direct := tc.direct
		script := "fcall"
		if tc.eval {
			script = "evalsha"
		}
		t.Run(fmt.Sprintf("DirectCalls=%v/EvalScripts=%v", direct, tc.eval), func(t *testing.T) {
			t.Parallel()
			c, err := NewClient(clientOptions(t, redistest.Standalone))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			h := &sendHook{}
			c.AddHook(h)
			s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t), DirectCalls: direct, EvalScripts: tc.eval})
			if err := s.LoadScripts(t.Context()); err != nil {
				t.Fatal(err)
			}
			k := storetest.NewTestKey(t)
			claim := reserveClaim(t, s, k, keystore.NewClaimID())
			h.take()
			if _, err := s.CompleteClaim(t.Context(), k, claim, bigAnswer); err != nil {
				t.Fatal(err)
			}
			if got, want := h.take(), [][]string{{"set", script}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("CompleteClaim sent %q; want %q", got, want)
			}
			k = storetest.NewTestKey(t)
			claim = reserveClaim(t, s, k, keystore.NewClaimID())
			claim.Route = "a route of another length"
			h.take()
			if _, err := s.CompleteClaim(t.Context(), k, claim, bigAnswer); err != nil {
				t.Fatal(err)
			}
			if got, want := h.take(), [][]string{{"set", script}, {script}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("CompleteClaim falling back sent %q; want %q", got, want)
			}
		})
	}
}

// The suite, with every answer moved by its scratch key (its answers are
// under movedMinBody).
func TestConformanceMovedAnswers(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		prefix := redistest.Prefix(t)
		storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
			s := newStore(t, c, prefix)
			s.movedMin = 0
			return s, s.advance
		})
	})
}

// Answers under movedMinBody go in complete_claim.lua's arguments: one
// command, not two.
func TestSmallAnswersNotMoved(t *testing.T) {
	t.Parallel()
	_, _, s := newPrefixed(t, redistest.Standalone)
	k := storetest.NewTestKey(t)
	claim := reserveClaim(t, s, k, keystore.NewClaimID())
	small := &keystore.Response{Status: 201, Body: bytes.Repeat([]byte("s"), movedMinBody-1)}
	how, moved, err := s.completeClaim(t.Context(), k, claim, small, newOp(), s.lua(), true)
	if err != nil || how != keystore.Completed || moved {
		t.Errorf("completeClaim of a %d-byte body = %v, moved %v, %v; want Completed, not moved", len(small.Body), how, moved, err)
	}
}

// TestMovedAnswerNoPerm: an ACL user whose key pattern covers the records
// but not the scratch keys gets NOPERM for a moved answer; the answer is
// stored the classic way, then and for every answer after it, and
// nothing is left behind.
func TestMovedAnswerNoPerm(t *testing.T) {
	t.Parallel()
	own := redistest.StartOwn(t)
	prefix := redistest.Prefix(t)
	admin := own.Client()
	if err := admin.Do(t.Context(), "ACL", "SETUSER", "narrow", "on", ">secret", "~"+prefix+"{*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(ClientOptions{Addrs: []string{own.Addr}, Username: "narrow", Password: "secret", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s := newStore(t, c, prefix)
	for i := range 3 {
		k := storetest.NewTestKey(t)
		claim := reserveClaim(t, s, k, keystore.NewClaimID())
		how, moved, err := s.completeClaim(t.Context(), k, claim, bigAnswer, newOp(), s.lua(), true)
		if err != nil || how != keystore.Completed || moved {
			t.Fatalf("answer %d: completeClaim = %v, moved %v, %v; want Completed the classic way", i, how, moved, err)
		}
		if !s.moveRefused.Load() {
			t.Fatalf("answer %d: the store still moves answers after NOPERM", i)
		}
		replayed(t, s, k, claim)
	}
	noScratchKeys(t, admin, prefix)
}
