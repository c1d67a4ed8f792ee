package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// redisErr is an error as Redis sends it (go-redis's HasErrorPrefix
// accepts any error with a RedisError method).
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// The errors an FCALL gets before its function runs, as each server or
// proxy words them, and errors that must not send a call to EVALSHA.
func TestRefusalOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want refusal
	}{
		{nil, notRefused},
		{redisErr("ERR Function not found"), refusedMissing},                                                     // Redis 7.0-7.4, Valkey
		{redisErr("ERR unknown command `FCALL`, with args beginning with: `idemgate_x`, `1`, "), refusedForGood}, // Redis 6
		{redisErr("ERR unknown command 'fcall', with args beginning with: "), refusedForGood},                    // renamed away
		{redisErr("ERR unsupported command 'fcall'"), refusedForGood},                                            // Envoy's Redis proxy
		{redisErr("NOPERM this user has no permissions to run the 'fcall' command"), refusedForGood},             // Redis 7.0
		{redisErr("NOPERM User idem has no permissions to run the 'fcall' command"), refusedForGood},             // Redis 7.2
		{redisErr("ERR unknown subcommand 'load'. Try FUNCTION HELP."), refusedForGood},                          // FUNCTION LOAD, a Redis without it
		{redisErr("NOPERM this user has no permissions to run the 'function|load' command"), refusedForGood},     // FUNCTION LOAD refused
		{redisErr("OOM command not allowed when used memory > 'maxmemory'."), refusedWrites},
		{redisErr("NOREPLICAS Not enough good replicas to write."), refusedWrites},
		{redisErr("MISCONF Errors writing to the AOF file: No space left on device"), refusedWrites},
		{redisErr("READONLY Can not run script with write flag on readonly replica"), refusedWrites},
		// Failures inside a function (after the checks), as Redis words them.
		{redisErr("ERR The user executing the script can't run this command or subcommand script: idemgate_x_reserve, on @user_function:12."), notRefused},
		{redisErr("ERR Unknown Redis command called from script script: idemgate_x_reserve"), notRefused},
		// Refused for its keys: a script is refused the same way, and an
		// answer moved by its scratch key goes the classic way (CompleteClaim).
		{redisErr("NOPERM this user has no permissions to access one of the keys used as arguments"), notRefused},
		{redisErr("ERR user_function:12: Script attempted to access nonexistent global variable 'x'"), notRefused},
		{redisErr("BUSY Redis is busy running a script."), notRefused},
		{redisErr("LOADING Redis is loading the dataset in memory"), notRefused},
		{redisErr("READONLY You can't write against a read only replica."), refusedWrites},
		{errors.New("ERR Function not found"), notRefused}, // not from Redis: a client's error
		{context.DeadlineExceeded, notRefused},
		{errNoReply, notRefused},
	} {
		if got := refusalOf(tc.err); got != tc.want {
			t.Errorf("refusalOf(%v) = %d; want %d", tc.err, got, tc.want)
		}
	}
}

// Each record format's library loads beside the other's (and beside any
// other release's: the names carry the code's digest), every function of
// it is registered, and get alone is read-only.
func TestLibraries(t *testing.T) {
	t.Parallel()
	own := redistest.StartOwn(t)
	c := ownClient(t, own.Addr, "")
	ctx := t.Context()
	compact, hash := formatScripts[FormatCompact].lib, formatScripts[FormatHash].lib
	if compact.name == hash.name || !strings.HasPrefix(compact.name, "idemgate_") || len(compact.name) != len("idemgate_")+16 {
		t.Fatalf("library names %q and %q: want idemgate_ and 16 hex digits, distinct", compact.name, hash.name)
	}
	for _, f := range formats {
		s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t), RecordFormat: f})
		if err := s.LoadScripts(ctx); err != nil || !s.Functions() {
			t.Fatalf("%v: LoadScripts = %v, Functions = %v", f, err, s.Functions())
		}
	}
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "idemgate_*"}).Result()
	if err != nil || len(libs) != 2 {
		t.Fatalf("FUNCTION LIST = %v, %v; want both libraries", libs, err)
	}
	for _, lib := range libs {
		sc := formatScripts[FormatCompact]
		if lib.Name == hash.name {
			sc = formatScripts[FormatHash]
		}
		want := map[string]bool{}
		for _, l := range []lua{sc.reserve, sc.completeClaim, sc.completeClaimMoved, sc.releaseClaim, sc.complete, sc.release, sc.renew, sc.get, sc.markSent, sc.markUnknown, sc.resolve} {
			want[l.fn.(string)] = l.fn == sc.get.fn
		}
		for _, fn := range lib.Functions {
			readOnly, ok := want[fn.Name]
			if !ok {
				t.Errorf("%s: unexpected function %s", lib.Name, fn.Name)
				continue
			}
			delete(want, fn.Name)
			if got := fmt.Sprint(fn.Flags); readOnly != (got == "[no-writes]") || !readOnly && got != "[]" {
				t.Errorf("%s flags %s", fn.Name, got)
			}
		}
		if len(want) > 0 {
			t.Errorf("%s lacks %v", lib.Name, want)
		}
	}
}

// After FUNCTION FLUSH (or on a new node), the first call is refused with
// "Function not found": it runs as a script, the library is loaded again
// where the key lives, and the next calls are functions again.
func TestFunctionFlushReload(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		h := &sendHook{}
		if rc, ok := c.(*redis.Client); ok {
			rc.AddHook(h)
		}
		s := newStore(t, c, redistest.Prefix(t))
		ctx := t.Context()
		if err := s.LoadScripts(ctx); err != nil {
			t.Fatal(err)
		}
		k := storetest.NewTestKey(t)
		res, err := s.Reserve(ctx, k, reserveOpts("a"))
		if err != nil {
			t.Fatalf("Reserve = %v", err)
		}
		var node *redis.Client
		if cc, ok := c.(*redis.ClusterClient); ok {
			if node, err = cc.MasterForKey(ctx, s.key(k)); err != nil {
				t.Fatal(err)
			}
		}
		each(t, c, func(ctx context.Context, c *redis.Client) error { return c.FunctionFlush(ctx).Err() })
		h.take()
		if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 201}); err != nil {
			t.Fatalf("Complete after FUNCTION FLUSH = %v", err)
		}
		if _, ok := c.(*redis.Client); ok {
			if got, want := h.take(), [][]string{{"fcall"}, {"function"}, {"evalsha"}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Complete after FUNCTION FLUSH sent %q; want %q", got, want)
			}
		}
		var lister redis.Cmdable = c
		if node != nil {
			lister = node
		}
		if libs, err := lister.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: s.lua().lib.name}).Result(); err != nil || len(libs) != 1 {
			t.Errorf("FUNCTION LIST after the reload = %v, %v; want the library", libs, err)
		}
		h.take()
		if r, err := s.Reserve(ctx, k, reserveOpts("a")); err != nil || r.Response == nil || r.Response.Status != 201 {
			t.Errorf("replay = %+v, %v; want status 201", r, err)
		}
		if _, ok := c.(*redis.Client); ok {
			if got, want := h.take(), [][]string{{"fcall"}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("replay sent %q; want %q", got, want)
			}
		}
		if !s.Functions() {
			t.Error("Functions = false after a reload")
		}
	})
}

// each runs f on every master of c (c itself unless a Cluster).
func each(t *testing.T, c redis.UniversalClient, f func(context.Context, *redis.Client) error) {
	t.Helper()
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(t.Context(), f)
	case *redis.Client:
		err = f(t.Context(), c)
	default:
		t.Fatalf("client %T", c)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// ownClient is a client of own's server as user ("" for the default user,
// who has no password; any other's is "pw").
func ownClient(t *testing.T, addr, user string) *redis.Client {
	t.Helper()
	o := ClientOptions{Addrs: []string{addr}, Username: user, Timeout: testTimeout}
	if user != "" {
		o.Password = "pw"
	}
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc, ok := c.(*redis.Client)
	if !ok {
		t.Fatalf("client %T", c)
	}
	return rc
}

// aclUser makes the ACL user "idem" (password "pw") on own's server with
// rules after "on >pw", and returns a client of the default user (admin)
// and one of idem.
func aclUser(t *testing.T, own *redistest.Own, rules ...string) (admin, user *redis.Client) {
	t.Helper()
	admin = ownClient(t, own.Addr, "")
	args := append([]any{"acl", "setuser", "idem", "on", ">pw"}, anySlice(rules)...)
	if err := admin.Do(t.Context(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	return admin, ownClient(t, own.Addr, "idem")
}

func anySlice(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// An ACL user without FCALL, or without FUNCTION LOAD while the library is
// missing, gets every call served with EVALSHA: the first call is refused
// once, and the store never asks again. Every write of the conformance
// suite's kind works meanwhile.
func TestFunctionsRefusedByACL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, deny string
		// trips is what the first Reserve sends, after LoadScripts.
		trips [][]string
	}{
		// LoadScripts's FUNCTION LOAD works; the first FCALL is refused.
		{"no fcall", "-fcall", [][]string{{"fcall"}, {"evalsha"}}},
		// LoadScripts's FUNCTION LOAD is refused: no FCALL is ever sent.
		{"no function load", "-function", [][]string{{"evalsha"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := aclUser(t, redistest.StartOwn(t), "~*", "&*", "+@all", tc.deny)
			h := &sendHook{}
			c.AddHook(h)
			s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t)})
			ctx := t.Context()
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatalf("LoadScripts = %v; want nil (the scripts loaded)", err)
			}
			h.take()
			k := storetest.NewTestKey(t)
			res, err := s.Reserve(ctx, k, reserveOpts("a"))
			if err != nil {
				t.Fatalf("Reserve = %v", err)
			}
			if got := h.take(); fmt.Sprint(got) != fmt.Sprint(tc.trips) {
				t.Errorf("Reserve sent %q; want %q", got, tc.trips)
			}
			if s.Functions() {
				t.Error("Functions = true; want false")
			}
			if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 201}); err != nil {
				t.Fatalf("Complete = %v", err)
			}
			if r, err := s.Reserve(ctx, k, reserveOpts("a")); err != nil || r.Response == nil || r.Response.Status != 201 {
				t.Errorf("replay = %+v, %v; want status 201", r, err)
			}
			if got, want := h.take(), [][]string{{"evalsha"}, {"evalsha"}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Complete and replay sent %q; want %q", got, want)
			}
		})
	}
}

// Over maxmemory, or short of replicas (min-replicas-to-write), Redis
// refuses a function that may write before it runs, where a script runs
// until its first write: a replay still works, and a new claim fails
// closed, as with scripts; functions stay on, and run again once Redis
// writes again.
func TestFunctionsRefusedWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, param, refuse, allow, err string
	}{
		{"maxmemory", "maxmemory", "1", "0", "OOM"},
		{"min-replicas-to-write", "min-replicas-to-write", "1", "0", "NOREPLICAS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			own := redistest.StartOwn(t)
			c := ownClient(t, own.Addr, "")
			h := &sendHook{}
			c.AddHook(h)
			s := newStore(t, c, redistest.Prefix(t))
			ctx := t.Context()
			if err := s.LoadScripts(ctx); err != nil {
				t.Fatal(err)
			}
			done := storetest.NewTestKey(t)
			res, err := s.Reserve(ctx, done, reserveOpts("a"))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Complete(ctx, done, res.Token, &keystore.Response{Status: 201, Body: []byte("kept")}); err != nil {
				t.Fatal(err)
			}
			if err := c.ConfigSet(ctx, tc.param, tc.refuse).Err(); err != nil {
				t.Fatal(err)
			}
			h.take()
			if r, err := s.Reserve(ctx, done, reserveOpts("a")); err != nil || r.Response == nil || string(r.Response.Body) != "kept" {
				t.Errorf("replay = %+v, %v; want the answer", r, err)
			}
			if got, want := h.take(), [][]string{{"fcall"}, {"evalsha"}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("replay sent %q; want %q", got, want)
			}
			if rec, err := s.Get(ctx, done); err != nil || rec.Response == nil {
				t.Errorf("Get = %+v, %v", rec, err)
			}
			if got, want := h.take(), [][]string{{"fcall"}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("Get sent %q; want %q (get is read-only: no refusal)", got, want)
			}
			fresh := storetest.NewTestKey(t)
			if _, err := s.Reserve(ctx, fresh, reserveOpts("a")); !redis.HasErrorPrefix(err, tc.err) {
				t.Errorf("a new claim = %v; want %s", err, tc.err)
			}
			if !s.Functions() {
				t.Fatal("Functions = false after a refused write")
			}
			if err := c.ConfigSet(ctx, tc.param, tc.allow).Err(); err != nil {
				t.Fatal(err)
			}
			h.take()
			if r, err := s.Reserve(ctx, fresh, reserveOpts("a")); err != nil || r.Response != nil {
				t.Errorf("claim once allowed = %+v, %v", r, err)
			}
			if got, want := h.take(), [][]string{{"fcall"}}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("claim once allowed sent %q; want %q", got, want)
			}
		})
	}
}

// A node that lost its library while many calls run compiles it once:
// every call refused with "Function not found" meanwhile waits for the
// same load (or finds it there), and none fails.
func TestFunctionFlushLoadsOnce(t *testing.T) {
	t.Parallel()
	own := redistest.StartOwn(t)
	c := ownClient(t, own.Addr, "")
	s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t), DirectCalls: true})
	ctx := t.Context()
	if err := s.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 64
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := s.Reserve(ctx, storetest.NewTestKey(t), reserveOpts("a"))
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Reserve after FUNCTION FLUSH = %v", err)
		}
	}
	stats, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	load := commandStats(t, stats)["function|load"]
	calls, failed := load["calls"], load["failed_calls"]
	if calls-failed != 1 {
		t.Errorf("FUNCTION LOAD compiled the library %v times (%v calls, %v refused as already loaded); want once", calls-failed, calls, failed)
	}
	if !s.Functions() {
		t.Error("Functions = false")
	}
}

// The conformance suite with scripts (Options.EvalScripts), as a Redis
// without functions runs it; TestConformance runs functions.
func TestConformanceEvalScripts(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
		s := newStoreOpts(t, c, Options{KeyPrefix: prefix, EvalScripts: true})
		return s, s.advance
	})
}
