package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// The design floor does the work it claims: a request id on every answer
// and forwarded, X-Forwarded-For, one access-log line per request, and a
// keyed POST that runs once, its key claimed for a second request; with
// its claims in memory and in Redis (-design -redis).
func TestDesignFloor(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		c := newMemClaims()
		testDesignFloor(t, c, func() [][]byte {
			c.mu.Lock()
			defer c.mu.Unlock()
			var out [][]byte
			for _, v := range c.m {
				if v != nil {
					out = append(out, v)
				}
			}
			return out
		})
	})
	t.Run("redis", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
		defer rdb.Close()
		prefix := fmt.Sprintf("designfloor-test-%d:", time.Now().UnixNano())
		c := &redisClaims{rdb: rdb, prefix: prefix}
		testDesignFloor(t, c, func() [][]byte {
			keys, err := rdb.Keys(t.Context(), prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Del(t.Context(), keys...)
			var out [][]byte
			for _, k := range keys {
				v, err := rdb.Get(t.Context(), k).Bytes()
				if err != nil {
					t.Fatal(err)
				}
				if ttl := rdb.PTTL(t.Context(), k).Val(); ttl <= lease {
					t.Errorf("an answer kept for %v; want the retention, %v", ttl, retention)
				}
				out = append(out, v)
			}
			return out
		})
	})
}

// testDesignFloor runs the design floor with its claims in c; answers
// returns what c keeps (answers and too-large marks; not claims).
func testDesignFloor(t *testing.T, c claims, answers func() [][]byte) {
	var ran atomic.Int64
	var forwarded atomic.Value
	var bodies atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded.Store(r.Header.Get("X-Forwarded-For") + " " + r.Header.Get("X-Request-Id"))
		if r.Header.Get("Accept-Encoding") != "" && r.URL.Path == "/orders" && r.Header.Get("Idempotency-Key") != "" {
			t.Errorf("a keyed write was forwarded with Accept-Encoding %q", r.Header.Get("Accept-Encoding"))
		}
		if n, _ := io.Copy(io.Discard, r.Body); n > 0 {
			bodies.Add(1)
		}
		switch r.URL.Query().Get("do") {
		case "own-id":
			w.Header().Set("X-Request-Id", "upstream-1")
		case "big":
			w.WriteHeader(http.StatusCreated)
			w.Write(bytes.Repeat([]byte("x"), maxResponseBytes+100))
			return
		case "hang-up":
			panic(http.ErrAbortHandler)
		}
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d}`, ran.Add(1))
			return
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	var logs testutil.SyncBuffer
	reg := prometheus.NewRegistry()
	d := designFloor(&httputil.ReverseProxy{BufferPool: &bufferPool{}, Transport: &http.Transport{DisableCompression: true}}, u, &logs, reg, c)
	srv := httptest.NewServer(d)
	defer srv.Close()

	// send sends a request with a JSON body, a request id unless id is
	// empty, and one Idempotency-Key header per key.
	send := func(method, path, body, id string, keys ...string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for _, k := range keys {
			req.Header.Add("Idempotency-Key", k)
		}
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header
	}
	doBody := func(method, path, body string, keys ...string) (int, string, http.Header) {
		t.Helper()
		return send(method, path, body, "", keys...)
	}
	do := func(method, key, id string) (int, string, http.Header) {
		t.Helper()
		if key == "" {
			return send(method, "/orders", `{"a":1}`, id)
		}
		return send(method, "/orders", `{"a":1}`, id, key)
	}

	code, body, h := do("GET", "", "")
	made := h.Get("X-Request-Id")
	if code != 200 || body != "ok" || made == "" {
		t.Fatalf("GET: %d %q, request id %q", code, body, made)
	}
	if got := forwarded.Load(); got != "127.0.0.1 "+made {
		t.Errorf("upstream got X-Forwarded-For and X-Request-Id %q; want 127.0.0.1 %s", got, made)
	}
	for _, id := range []string{"", "a b", strings.Repeat("x", 201), "caf\u00e9"} {
		if _, _, h := do("GET", "", id); h.Get("X-Request-Id") == id {
			t.Errorf("request id %q kept; want one made", id)
		}
	}
	if _, _, h := do("GET", "", "mine-1"); h.Get("X-Request-Id") != "mine-1" {
		t.Errorf("request id mine-1 answered as %q", h.Get("X-Request-Id"))
	}

	if code, body, _ := do("POST", "k-1", ""); code != 201 || body != `{"run":1}` {
		t.Fatalf("first keyed POST: %d %q", code, body)
	}
	if code, _, _ := do("POST", "k-1", ""); code != http.StatusConflict {
		t.Errorf("second keyed POST: %d; want 409", code)
	}
	if code, _, _ := do("POST", "bad key", ""); code != http.StatusBadRequest {
		t.Errorf("keyed POST with a bad key: %d; want 400", code)
	}
	if code, _, _ := do("POST", "k-2", ""); code != 201 || ran.Load() != 2 {
		t.Errorf("another key: %d, upstream ran %d times; want 201, 2", code, ran.Load())
	}
	// The family of keys and bodies a keyed write refuses, nothing
	// forwarded; and what it frees, keeps or streams.
	sent := bodies.Load()
	for _, tc := range []struct {
		name string
		keys []string
		body string
		want int
	}{
		{"key of 256", []string{strings.Repeat("k", 256)}, `{}`, 400},
		{"key twice", []string{"k-3", "k-3"}, `{}`, 400},
		{"key with a space", []string{"k 3"}, `{}`, 400},
		{"body over 1 MiB", []string{"k-4"}, `"` + strings.Repeat("b", maxBodyBytes) + `"`, 413},
	} {
		if code, _, _ := doBody("POST", "/orders", tc.body, tc.keys...); code != tc.want {
			t.Errorf("%s: %d; want %d", tc.name, code, tc.want)
		}
	}
	if bodies.Load() != sent {
		t.Errorf("refused keyed writes reached the upstream")
	}
	if code, _, _ := doBody("POST", "/orders", `{}`, strings.Repeat("k", 255)); code != 201 {
		t.Errorf("key of 255: %d; want 201", code)
	}
	if _, _, h := doBody("POST", "/orders?do=own-id", `{}`, "k-5"); fmt.Sprint(h.Values("X-Request-Id")) != "[upstream-1]" {
		t.Errorf("the upstream's own request id answered as %q", h.Values("X-Request-Id"))
	}
	if code, body, _ := doBody("POST", "/orders?do=big", `{}`, "k-6"); code != 201 || len(body) != maxResponseBytes+100 {
		t.Errorf("a large answer: %d, %d bytes; want 201, %d", code, len(body), maxResponseBytes+100)
	}
	// An upstream that hangs up: no answer kept, the key freed for a retry.
	if code, _, _ := doBody("POST", "/orders?do=hang-up", `{}`, "k-7"); code != http.StatusBadGateway {
		t.Errorf("an upstream that hung up: %d; want 502", code)
	}
	if code, _, _ := doBody("POST", "/orders", `{}`, "k-7"); code != 201 {
		t.Errorf("the retry of a write without an answer: %d; want 201", code)
	}
	// Not a route: a keyed GET and a keyed POST elsewhere pass through.
	if code, body, _ := doBody("POST", "/other", `{}`, "k-8"); code != 201 || body == "" {
		t.Errorf("a keyed POST off the routes: %d %q", code, body)
	}
	if code, _, _ := doBody("POST", "/other", `{}`, "k-8"); code != 201 {
		t.Errorf("its second run: %d; want 201 (not claimed)", code)
	}
	// The fingerprint reads a JSON body in canonical form.
	if a, b := canonical("application/json", []byte(`{"b":1, "a":[2.50,"x"]}`)), canonical("application/json; charset=utf-8", []byte(`{"a":[2.50,"x"],"b":1}`)); string(a) != string(b) || string(a) != `{"a":[2.50,"x"],"b":1}` {
		t.Errorf("canonical forms %s and %s; want both {\"a\":[2.50,\"x\"],\"b\":1}", a, b)
	}
	if got := canonical("text/plain", []byte(`{"b":1, "a":2}`)); string(got) != `{"b":1, "a":2}` {
		t.Errorf("a text body fingerprinted as %s", got)
	}

	stored, tooLarge := 0, 0
	var answer []byte
	for _, v := range answers() {
		switch {
		case string(v) == "too_large":
			tooLarge++
		default:
			stored++
		}
		if bytes.Contains(v, []byte(`{"run":1}`)) {
			answer = v
		}
	}
	if stored != 5 || tooLarge != 1 || !bytes.HasPrefix(answer, []byte("201\r\n")) {
		t.Errorf("%d answers kept, %d too large, the first %q; want 5, 1, starting 201", stored, tooLarge, answer)
	}

	if err := d.flushLog(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 21 {
		t.Fatalf("%d access-log lines; want 21:\n%s", len(lines), logs.String())
	}
	outcomes := map[string]int{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		outcomes[fmt.Sprint(m["outcome"], " ", m["status"])]++
	}
	want := map[string]int{"passthrough 200": 6, "passthrough 201": 2, "executed 201": 6, "executed 502": 1,
		"in_progress 409": 1, "rejected 400": 4, "rejected 413": 1}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("outcomes %v; want %v", outcomes, want)
	}
	if n, err := reg.Gather(); err != nil || len(n) != 2 {
		t.Errorf("metrics: %d families, %v; want 2", len(n), err)
	}
}
