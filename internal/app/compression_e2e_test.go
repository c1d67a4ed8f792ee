package app

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// corpusAnswer is a real-looking Stripe charge (3.6 KB of JSON) from the
// compression corpus (keystore/compressed/testdata).
func corpusAnswer(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("../../keystore/compressed/testdata/corpus/stripe_charge.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonUpstream answers every request 200 with body and a few end-to-end
// headers, and counts what it ran.
type jsonUpstream struct {
	*httptest.Server
	hits atomic.Int64
}

func newJSONUpstream(t *testing.T, body []byte) *jsonUpstream {
	u := &jsonUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Request-Id", "req_up_1")
		h["Set-Cookie"] = []string{"b=2", "a=1"}
		w.Write(body)
	}))
	t.Cleanup(u.Close)
	return u
}

// sameAnswer reports how a replay differs from the first answer, beyond
// what DESIGN.md's Replays makes fresh (Date, Content-Length, the request
// id, the replay header).
func sameAnswer(first, replay httpAnswer) string {
	if replay.status != first.status {
		return fmt.Sprintf("status %d; want %d", replay.status, first.status)
	}
	if replay.body != first.body {
		return fmt.Sprintf("body of %d bytes differs from the first answer's %d", len(replay.body), len(first.body))
	}
	for _, k := range []string{"Content-Type", "Request-Id", "Set-Cookie"} {
		if got, want := strings.Join(replay.header[k], "|"), strings.Join(first.header[k], "|"); got != want {
			return fmt.Sprintf("%s %q; want %q", k, got, want)
		}
	}
	if replay.header.Get("Idempotent-Replayed") != "true" {
		return "no Idempotent-Replayed: true"
	}
	return ""
}

// With store.compression: zstd, a replay through the proxy is the first
// answer byte for byte, and the memory store holds the answer in less
// than half its body's size; store.compression reloads live, and the
// answers written before and after the reload both replay.
func TestCompressionReplayAndReload(t *testing.T) {
	t.Parallel()
	body := corpusAnswer(t)
	up := newJSONUpstream(t, body)
	yaml := func(compression string) string {
		return reloadYAML(up.URL, "", "store: {backend: memory, compression: "+compression+"}")
	}
	oa, km := startWatched(t, yaml("none"))
	c := e2eClient(t)
	// write stores one answer with key and returns the bytes the memory
	// store grew by.
	write := func(key string) (httpAnswer, int64) {
		t.Helper()
		before := oa.built.mem.Bytes()
		a := doHTTP(t, c, "POST", oa.base+"/pay", `{"amount":4900}`, "Idempotency-Key", key)
		if a.status != http.StatusOK || a.body != string(body) {
			t.Fatalf("POST /pay = %d (%d bytes)", a.status, len(a.body))
		}
		return a, oa.built.mem.Bytes() - before
	}
	plain, grew := write("before")
	if grew < int64(len(body)) {
		t.Errorf("compression none: the store grew by %d bytes for a %d-byte body; want at least the body", grew, len(body))
	}
	km.update(t, yaml("zstd"))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	packed, grew := write("after")
	if 2*grew > int64(len(body)) {
		t.Errorf("compression zstd: the store grew by %d bytes for a %d-byte body; want at most half", grew, len(body))
	}
	for key, first := range map[string]httpAnswer{"before": plain, "after": packed} {
		replay := doHTTP(t, c, "POST", oa.base+"/pay", `{"amount":4900}`, "Idempotency-Key", key)
		if diff := sameAnswer(first, replay); diff != "" {
			t.Errorf("replay of %q: %s", key, diff)
		}
	}
	// A retry of the compressed answer, replayed once above, is not
	// decoded again: the memory store's cache of opened answers has it.
	hits := oa.built.compressed.OpenCacheStats().Hits
	if diff := sameAnswer(packed, doHTTP(t, c, "POST", oa.base+"/pay", `{"amount":4900}`, "Idempotency-Key", "after")); diff != "" {
		t.Errorf("second replay of %q: %s", "after", diff)
	}
	if got := oa.built.compressed.OpenCacheStats().Hits; got != hits+1 {
		t.Errorf("the second replay: %d opens from the cache; want %d", got, hits+1)
	}
	if n := up.hits.Load(); n != 2 {
		t.Errorf("the upstream ran %d requests; want 2", n)
	}
	if strings.Contains(oa.logs.String(), "need a restart") {
		t.Errorf("store.compression asked for a restart:\n%s", oa.logs)
	}
}

// Two replicas share one Redis, one with store.compression: zstd and one
// without (a rollout that turns it on): each replays what the other
// wrote, byte for byte, and the zstd replica's records are the smaller.
func TestRedisE2ECompressionMixedReplicas(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	body := corpusAnswer(t)
	up := newJSONUpstream(t, body)
	prefix := e2ePrefix(t)
	none := startReplica(t, e2eConfig(t, e2eYAML(up.URL, addr, prefix, "")))
	zstd := startReplica(t, e2eConfig(t, strings.Replace(e2eYAML(up.URL, addr, prefix, ""), "backend: redis", "backend: redis\n  compression: zstd", 1)))
	c := e2eClient(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	seen := map[string]bool{}
	// newRecord returns the size of the one record written since the last
	// call.
	newRecord := func() int64 {
		t.Helper()
		keys, err := rdb.Keys(t.Context(), prefix+"{*").Result()
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int64
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				sizes = append(sizes, rdb.StrLen(t.Context(), k).Val())
			}
		}
		if len(sizes) != 1 {
			t.Fatalf("%d new records; want one", len(sizes))
		}
		return sizes[0]
	}
	for _, tc := range []struct {
		name, key     string
		write, replay string
		compressed    bool
	}{
		{"written by zstd, replayed by none", "zstd-to-none", zstd, none, true},
		{"written by none, replayed by zstd", "none-to-zstd", none, zstd, false},
	} {
		first := doHTTP(t, c, "POST", tc.write+"/pay", `{}`, "Idempotency-Key", tc.key, "Authorization", "Bearer e2e")
		if first.status != http.StatusOK || first.body != string(body) {
			t.Fatalf("%s: first = %d (%.300s)", tc.name, first.status, first.body)
		}
		size := newRecord()
		if small := 2*size < int64(len(body)); small != tc.compressed {
			t.Errorf("%s: the record takes %d bytes for a %d-byte body; want compressed %v", tc.name, size, len(body), tc.compressed)
		}
		replay := doHTTP(t, c, "POST", tc.replay+"/pay", `{}`, "Idempotency-Key", tc.key, "Authorization", "Bearer e2e")
		if diff := sameAnswer(first, replay); diff != "" {
			t.Errorf("%s: %s", tc.name, diff)
		}
	}
	if n := up.hits.Load(); n != 2 {
		t.Errorf("the upstream ran %d requests; want 2", n)
	}
}
