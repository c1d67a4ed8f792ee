package app

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestReplayCacheE2E: two replicas on one real Redis, each with its replay
// cache (the default). A replay is served from the cache of the replica
// that saw it before; after a store loss that replica still replays the
// answer it holds while the key is claimed anew on the other; an
// operator's release on replica A drops the key from replica B's cache
// (Pub/Sub), so B's next request runs instead of a stale replay.
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
  - {name: pay, method: POST, path: /pay, idempotent: true, timeout: 300ms}
`
	token := "admin-token-0123456789abcdef"
	a, b := startOpsApp(t, yaml, "", &token), startOpsApp(t, yaml, "", nil)
	if a.built.cache == nil || b.built.cache == nil {
		t.Fatal("no replay cache with the default store.redis.replay_cache")
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
	if s := b.built.cache.Stats(); s.Hits != 1 || s.Misses != 1 || s.Entries != 1 {
		t.Fatalf("B's cache = %+v; want 1 hit, 1 miss, 1 entry", s)
	}
	if s := a.built.cache.Stats(); s.Hits != 0 || s.Entries != 0 {
		t.Fatalf("A's cache = %+v; want nothing (A ran the write, it replayed nothing)", s)
	}
	if m := doHTTP(t, c, "GET", b.adminBase+"/metrics", ""); !strings.Contains(m.body, "\nidemgate_replay_cache_hits_total 1\n") ||
		!strings.Contains(m.body, "\nidemgate_replay_cache_entries 1\n") {
		t.Errorf("B's /metrics lacks idemgate_replay_cache_hits_total 1 and idemgate_replay_cache_entries 1")
	}

	// Store loss: the record vanishes from Redis. A claims the key anew;
	// its upstream never answers (504, the claim is kept).
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys under %s = %v, %v; want the record", prefix, keys, err)
	}
	if err := rdb.Del(t.Context(), keys...).Err(); err != nil {
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
	deadline := time.Now().Add(5 * time.Second)
	for b.built.cache.Stats().Entries != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("B's cache still holds the key 5s after A's release: %+v", b.built.cache.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
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
}

// TestReplayCacheOff: store.redis.replay_cache.max_entries 0 builds no
// cache, and a store reset is then a no-op; with the cache on, a store
// reset empties it.
func TestReplayCacheOff(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	up := newCountingUpstream(t)
	base := `
upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
store:
  backend: redis
  redis:
    addrs: ["` + addr + `"]
    key_prefix: "` + e2ePrefix(t) + `"
`
	off := startOpsApp(t, base+"    replay_cache: {max_entries: 0}\n", "", nil)
	if off.built.cache != nil {
		t.Fatal("a replay cache with max_entries 0")
	}
	off.storeReset() // nothing to purge
	on := startOpsApp(t, base, "", nil)
	c := e2eClient(t)
	for range 2 {
		doHTTP(t, c, "POST", on.base+"/pay", `{}`, "Idempotency-Key", "k1", "Authorization", "Bearer e2e-client")
	}
	if s := on.built.cache.Stats(); s.Entries != 1 {
		t.Fatalf("cache = %+v; want 1 entry", s)
	}
	on.storeReset()
	if s := on.built.cache.Stats(); s.Entries != 0 || s.Purges == 0 {
		t.Fatalf("cache after a store reset = %+v; want empty, purged", s)
	}
	if ans := doHTTP(t, c, "POST", on.base+"/pay", `{}`, "Idempotency-Key", "k1", "Authorization", "Bearer e2e-client"); ans.header.Get("Idempotent-Replayed") != "true" || up.count("/pay", "k1") != 1 {
		t.Fatalf("replay after the purge = %v; want the stored answer, from Redis", ans)
	}
}
