package app

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// Two replicas sharing one Redis while store.redis.record_format changes
// (a rolling restart): one writes hashes, the other compact strings. A
// write made through either replays through the other, concurrent
// duplicates spread over both run once, and both formats are in Redis.
func TestRedisE2EMixedRecordFormats(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	up := newCountingUpstream(t)
	prefix := e2ePrefix(t)
	hash := startReplica(t, e2eConfig(t, strings.Replace(e2eYAML(up.URL, addr, prefix, ""), "timeout: 3s}", "timeout: 3s, record_format: hash}", 1)))
	compact := startReplica(t, e2eConfig(t, e2eYAML(up.URL, addr, prefix, "")))
	c := e2eClient(t)

	for i, pair := range [][2]string{{hash, compact}, {compact, hash}} {
		for k := range 10 {
			key := fmt.Sprintf("seq-%d-%d", i, k)
			body := fmt.Sprintf(`{"n":%d}`, k)
			first := post(c, pair[0], key, body)
			retry := post(c, pair[1], key, body)
			if first.err != nil || first.status != http.StatusCreated || retry.err != nil || retry.status != first.status || retry.body != first.body {
				t.Fatalf("%s: first %v, retry through the other format %v; want the same 201", key, first, retry)
			}
			if retry.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("%s: retry headers %v; want Idempotent-Replayed: true", key, retry.header)
			}
			if conflict := post(c, pair[1], key, `{"other":1}`); conflict.status != http.StatusConflict || !strings.Contains(conflict.body, `"idempotency_key_reused"`) {
				t.Errorf("%s: another body through the other format = %v; want idempotency_key_reused", key, conflict)
			}
		}
	}

	const keys, dups = 20, 10
	var wg sync.WaitGroup
	answers := make([][dups]e2eAnswer, keys)
	for k := range keys {
		for d := range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := hash
				if d%2 == 1 {
					base = compact
				}
				key := fmt.Sprintf("dup-%d", k)
				for range 200 {
					a := post(c, base, key, `{"dup":true}`)
					answers[k][d] = a
					if !a.inProgress() {
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprintf("dup-%d", k)
		if n := up.count("/pay", key); n != 1 {
			t.Errorf("%s ran %d times; want once", key, n)
		}
		for d := 1; d < dups; d++ {
			if answers[k][d].status != http.StatusCreated || answers[k][d].body != answers[k][0].body {
				t.Errorf("%s: answer %d = %v; want %v", key, d, answers[k][d], answers[k][0])
			}
		}
	}

	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	types := map[string]int{}
	iter := rdb.Scan(t.Context(), 0, prefix+"{*", 100).Iterator()
	for iter.Next(t.Context()) {
		types[rdb.Type(t.Context(), iter.Val()).Val()]++
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if types["hash"] == 0 || types["string"] == 0 || len(types) != 2 {
		t.Errorf("record types in Redis = %v; want hashes and strings", types)
	}
}

// store.redis.record_format reloads live: the second step of a rolling
// upgrade from 0.1.0 (removing record_format: hash) needs no restart.
func TestReloadRecordFormat(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	up := newCountingUpstream(t)
	prefix := e2ePrefix(t)
	yaml := func(format string) string {
		return reloadYAML(up.URL, "", `store: {backend: redis, redis: {addrs: ["`+addr+`"], key_prefix: "`+prefix+`", timeout: 3s, record_format: `+format+`}}`)
	}
	oa, km := startWatched(t, yaml("hash"))
	c := e2eClient(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	// typeOf writes once with key and returns the type of the one new
	// record in Redis.
	seen := map[string]bool{}
	write := func(key string) string {
		t.Helper()
		if a := doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", key); a.status != http.StatusCreated {
			t.Fatalf("POST /pay = %v", a)
		}
		keys, err := rdb.Keys(t.Context(), prefix+"{*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				got = append(got, rdb.Type(t.Context(), k).Val())
			}
		}
		if len(got) != 1 {
			t.Fatalf("new records after one write: %v; want one", got)
		}
		return got[0]
	}
	if got := write("before"); got != "hash" {
		t.Fatalf("record_format: hash wrote a %s", got)
	}
	km.update(t, yaml("compact"))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	if got := write("after"); got != "string" {
		t.Errorf("after the reload to compact, a %s was written; want a string", got)
	}
	if a := doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", "before"); a.status != http.StatusCreated || a.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry of the hash record after the reload = %v; want its replay", a)
	}
	if n := up.count("/pay", "before"); n != 1 {
		t.Errorf("the write before the reload ran %d times; want once", n)
	}
	if strings.Contains(oa.logs.String(), "need a restart") {
		t.Errorf("record_format asked for a restart:\n%s", oa.logs)
	}
}
