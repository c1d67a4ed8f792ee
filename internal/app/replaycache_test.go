package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// TestReplayCacheE2E: two replicas on one real Redis, each with its replay
// cache (the default). A replay is served from the cache of the replica
// that saw it before; after a store loss the epoch watcher cannot see,
// that replica still replays the answer it holds while the key is claimed
// anew on the other; an operator's release on replica A drops the key from
// replica B's cache (Pub/Sub), so B's next request runs instead of a stale
// replay; a loss the epoch watcher sees empties the caches.
func TestReplayCacheE2E(t *testing.T) {
	t.Parallel()
	addr, prefix := redistest.Addr(t), e2ePrefix(t)
	up := newCountingUpstream(t)
	yaml := `
upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
idempotency: {tenant: shop-1}
store:
  backend: redis
  redis: {addrs: ["` + addr + `"], key_prefix: "` + prefix + `", timeout: 3s}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, timeout: 2s}
`
	token := "admin-token-0123456789abcdef"
	a, b := startOpsApp(t, yaml, "", &token), startOpsApp(t, yaml, "", nil)
	if a.built.cache == nil || b.built.cache == nil {
		t.Fatal("no replay cache with the default store.redis.replay_cache")
	}
	// Each cache empties itself when its invalidation subscription is made
	// (it may have missed messages before): wait for that first purge, so
	// that it cannot drop what the test caches below.
	for _, r := range []*opsApp{a, b} {
		testutil.Eventually(t, 10*time.Second, "the replay cache's first purge (its subscription)", func() bool { return r.built.cache.Stats().Purges > 0 })
	}
	c := e2eClient(t)
	const key = "cached-1"
	pay := func(base string, hdr ...string) httpAnswer {
		t.Helper()
		return doHTTP(t, c, "POST", base+"/pay", `{"amount":7}`, append([]string{"Idempotency-Key", key, "Authorization", "Bearer client-1"}, hdr...)...)
	}
	replayed := func(ans httpAnswer) bool {
		return ans.status == 201 && ans.header.Get("Idempotent-Replayed") == "true" && strings.Contains(ans.body, `"execution":1`)
	}

	if ans := pay(a.base); ans.status != 201 || ans.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first write on A = %v; want 201 from the upstream", ans)
	}
	// B's first replay comes from Redis and is cached; the next from B's cache.
	for i := range 2 {
		if ans := pay(b.base); !replayed(ans) {
			t.Fatalf("replay %d on B = %v (replayed %q); want the first answer", i, ans, ans.header.Get("Idempotent-Replayed"))
		}
	}
	if s := b.built.cache.Stats(); s.Hits != 1 || s.Misses != 1 || s.Entries != 1 || s.Purges != 1 {
		t.Fatalf("B's cache = %+v; want 1 hit, 1 miss, 1 entry", s)
	}
	if s := a.built.cache.Stats(); s.Hits != 0 || s.Entries != 0 {
		t.Fatalf("A's cache = %+v; want nothing (A ran the write, it replayed nothing)", s)
	}
	if m := doHTTP(t, c, "GET", b.adminBase+"/metrics", ""); !strings.Contains(m.body, "\nidemgate_replay_cache_hits_total 1\n") ||
		!strings.Contains(m.body, "\nidemgate_replay_cache_entries 1\n") {
		t.Errorf("B's /metrics lacks idemgate_replay_cache_hits_total 1 and idemgate_replay_cache_entries 1")
	}

	// Store loss the epoch watcher cannot see (a failover to a replica
	// that lagged: the record is gone, the epoch marker is not). A claims
	// the key anew; its upstream never answers (504, the claim is kept).
	// (A loss it sees empties the caches: TestReplayCacheOff.)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var records []string
	for _, k := range keys {
		if !strings.HasPrefix(k, prefix+"epoch") {
			records = append(records, k)
		}
	}
	if len(records) == 0 {
		t.Fatalf("keys under %s = %v; want the record", prefix, keys)
	}
	if err := rdb.Del(t.Context(), records...).Err(); err != nil {
		t.Fatal(err)
	}
	if ans := pay(a.base, "X-Hang", "1"); ans.status != 504 || up.count("/pay", key) != 2 {
		t.Fatalf("write on A after the loss = %v, executions %d; want 504 from a second execution", ans, up.count("/pay", key))
	}
	// B still replays what it holds (README: after a store loss).
	if ans := pay(b.base); !replayed(ans) || up.count("/pay", key) != 2 {
		t.Fatalf("B after the loss = %v, executions %d; want its cached answer", ans, up.count("/pay", key))
	}

	// The operator releases the claim on A: every replica drops the key.
	auth := []string{"Authorization", "Bearer " + token}
	kb := doHTTP(t, c, "POST", a.adminBase+"/admin/keys", `{"tenant":"shop-1","identity":{"Authorization":["Bearer client-1"]},"idempotency_key":"`+key+`"}`, auth...)
	var km map[string]any
	json.Unmarshal([]byte(kb.body), &km)
	hexKey, _ := km["key"].(string)
	if rel := doHTTP(t, c, "POST", a.adminBase+"/admin/claims/"+hexKey+"/release", `{"reason":"INC-3: no charge"}`, auth...); rel.status != 200 {
		t.Fatalf("release on A = %v (key %v)", rel, kb)
	}
	testutil.Eventually(t, 10*time.Second, "B's cache to drop the key A released", func() bool { return b.built.cache.Stats().Entries == 0 })
	if ans := pay(b.base); ans.status != 201 || ans.header.Get("Idempotent-Replayed") != "" || up.count("/pay", key) != 3 {
		t.Fatalf("B after the release = %v (replayed %q), executions %d; want 201 from a third execution",
			ans, ans.header.Get("Idempotent-Replayed"), up.count("/pay", key))
	}
	// And the new answer is what both replicas replay now.
	for _, base := range []string{a.base, b.base} {
		if ans := pay(base); ans.status != 201 || ans.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(ans.body, `"execution":3`) {
			t.Errorf("replay after the rerun = %v; want the third execution's answer", ans)
		}
	}

	// A loss the epoch watcher sees (the marker vanishes: FLUSHALL, a
	// restart without persistence) empties every replica's cache within
	// its check interval (1s): no replica replays what the store lost.
	if s := b.built.cache.Stats(); s.Entries != 1 {
		t.Fatalf("B's cache before the reset = %+v; want the third answer", s)
	}
	markers, err := rdb.Keys(t.Context(), prefix+"epoch*").Result()
	if err != nil || len(markers) == 0 {
		t.Fatalf("epoch markers under %s = %v, %v", prefix, markers, err)
	}
	if err := rdb.Del(t.Context(), markers...).Err(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "B's cache to empty after the epoch marker vanished", func() bool { return b.built.cache.Stats().Entries == 0 })
}

// TestReplayCacheOff: store.redis.replay_cache.max_entries 0 builds no
// cache, and every replay then comes from Redis.
func TestReplayCacheOff(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	off := startOpsApp(t, `
upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
store:
  backend: redis
  redis:
    addrs: ["`+redistest.Addr(t)+`"]
    key_prefix: "`+e2ePrefix(t)+`"
    replay_cache: {max_entries: 0}
`, "", nil)
	if off.built.cache != nil {
		t.Fatal("a replay cache with max_entries 0")
	}
	off.built.purgeCache() // a store reset: nothing to purge
	c := e2eClient(t)
	for i := range 3 {
		ans := doHTTP(t, c, "POST", off.base+"/pay", `{}`, "Idempotency-Key", "k1", "Authorization", "Bearer e2e-client")
		if ans.status != 201 || (i > 0) != (ans.header.Get("Idempotent-Replayed") == "true") || up.count("/pay", "k1") != 1 {
			t.Fatalf("request %d = %v, executions %d; want the first answer, replayed from Redis after the first", i, ans, up.count("/pay", "k1"))
		}
	}
	m := doHTTP(t, c, "GET", off.adminBase+"/metrics", "")
	if strings.Contains(m.body, "idemgate_replay_cache_") {
		t.Error("/metrics has idemgate_replay_cache_* families without a cache")
	}
}
