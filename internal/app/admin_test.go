package app

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
)

// opsApp is an app serving on loopback listeners for the ops tests.
type opsApp struct {
	*App
	base, adminBase string
	logs            *syncBuffer
	stop            func()
}

// startOpsApp runs an app for yaml. configPath, when set, is watched
// (reload.go); token, when non-nil, is the admin token.
func startOpsApp(t *testing.T, yaml, configPath string, token *string) *opsApp {
	t.Helper()
	cfg, err := parseConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	a, err := New(cfg, Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if token != nil {
		a.setAdminToken(*token)
	}
	if configPath != "" {
		a.o.ConfigPath = configPath
		a.reload.debounce, a.reload.poll = 20*time.Millisecond, -1
	}
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	stop := serveUntilCleanup(t, a, lns)
	return &opsApp{App: a, base: "http://" + lns.Public.Addr().String(), adminBase: "http://" + lns.Admin.Addr().String(), logs: logs, stop: stop}
}

// countingUpstream counts executions per key; a request with X-Hang waits
// until the proxy gives up on it (its context ends).
type countingUpstream struct {
	*httptest.Server
	mu    sync.Mutex // protects execs
	execs map[string]int
}

func newCountingUpstream(t *testing.T) *countingUpstream {
	u := &countingUpstream{execs: map[string]int{}}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		key := r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.execs[r.URL.Path+" "+key]++
		n := u.execs[r.URL.Path+" "+key]
		u.mu.Unlock()
		if r.Header.Get("X-Hang") != "" {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"path":%q,"key":%q,"execution":%d}`, r.URL.Path, key, n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *countingUpstream) count(path, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.execs[path+" "+key]
}

type httpAnswer struct {
	status int
	header http.Header
	body   string
}

func (a httpAnswer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }

func doHTTP(t *testing.T, c *http.Client, method, url, body string, hdr ...string) httpAnswer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 { // as spelled: a lowercase name stays lowercase on the wire
		req.Header[hdr[i]] = append(req.Header[hdr[i]], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return httpAnswer{res.StatusCode, res.Header, string(b)}
}

// TestAdminRepair: a keyed write whose outcome is unknown (the upstream
// timed out) stays claimed; the operator finds it, releases it (the retry
// runs) or completes it with the answer the upstream gave (the retry
// replays that answer, and nothing runs twice). Run on the memory store,
// and on Redis when IDEMGATE_TEST_REDIS_ADDR is set.
func TestAdminRepair(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			store := ""
			if backend == "redis" {
				store = redisStoreYAML(redistest.Addr(t), e2ePrefix(t))
			}
			up := newCountingUpstream(t)
			token := "admin-token-0123456789abcdef"
			oa := startOpsApp(t, `
upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0}
idempotency: {tenant: shop-1, drop_headers: [Set-Cookie]}`+store+`
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, timeout: 2s, drop_headers: [X-Secret]}
`, "", &token)
			testAdminRepair(t, oa, up, token)
		})
	}
}

// redisStoreYAML is the store section of a config on the Redis at addr,
// with key_prefix prefix.
func redisStoreYAML(addr, prefix string) string {
	return `
store:
  backend: redis
  redis: {addrs: ["` + addr + `"], key_prefix: "` + prefix + `"}`
}

func testAdminRepair(t *testing.T, oa *opsApp, up *countingUpstream, token string) {
	c := e2eClient(t)
	auth := []string{"Authorization", "Bearer " + token}
	adm := func(method, path, body string) (httpAnswer, map[string]any) {
		t.Helper()
		a := doHTTP(t, c, method, oa.adminBase+path, body, auth...)
		var m map[string]any
		json.Unmarshal([]byte(a.body), &m)
		return a, m
	}
	pay := func(key string, hdr ...string) httpAnswer {
		t.Helper()
		return doHTTP(t, c, "POST", oa.base+"/pay", `{"amount":7}`, append([]string{"Idempotency-Key", key, "Authorization", "Bearer client-1"}, hdr...)...)
	}

	// Auth rules on the real admin listener (loopback included).
	if a := doHTTP(t, c, "GET", oa.adminBase+"/admin/claims", ""); a.status != 401 {
		t.Errorf("admin without a token = %v; want 401", a)
	}
	if a := doHTTP(t, c, "GET", oa.adminBase+"/admin/claims", "", "Authorization", "Bearer wrong"); a.status != 401 {
		t.Errorf("admin with a wrong token = %v; want 401", a)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if a := doHTTP(t, c, "GET", oa.adminBase+p, ""); a.status != 200 {
			t.Errorf("%s without a token = %v; want 200 (open)", p, a)
		}
	}

	for _, c := range []struct {
		key    string
		repair func(hexKey string)
		check  func(retry httpAnswer)
	}{
		{
			key: "release-me",
			repair: func(hexKey string) {
				if a, _ := adm("POST", "/admin/claims/"+hexKey+"/release", `{}`); a.status != 400 {
					t.Errorf("release without a reason = %v; want 400", a)
				}
				if a, _ := adm("POST", "/admin/claims/"+hexKey+"/release", `{"reason":"INC-1: the PSP shows no charge"}`); a.status != 200 {
					t.Fatalf("release = %v", a)
				}
			},
			check: func(retry httpAnswer) {
				if retry.status != 201 || retry.header.Get("Idempotent-Replayed") != "" || up.count("/pay", "release-me") != 2 {
					t.Errorf("retry after release = %v, executions %d; want 201 from a second execution", retry, up.count("/pay", "release-me"))
				}
			},
		},
		{
			key: "complete-me",
			repair: func(hexKey string) {
				// The route's drop_headers replace the global ones for
				// an operator's answer too.
				body := `{"reason":"INC-2: charge ch_9 exists","status":201,"headers":{"Content-Type":["application/json"],"X-Secret":["s"],"Set-Cookie":["sid=1"]},"body":"{\"charge\":\"ch_9\"}"}`
				if a, _ := adm("POST", "/admin/claims/"+hexKey+"/complete", body); a.status != 200 {
					t.Fatalf("complete = %v", a)
				}
			},
			check: func(retry httpAnswer) {
				if retry.status != 201 || retry.header.Get("Idempotent-Replayed") != "true" || retry.body != `{"charge":"ch_9"}` ||
					retry.header.Get("Content-Type") != "application/json" || up.count("/pay", "complete-me") != 1 ||
					retry.header.Get("X-Secret") != "" || retry.header.Get("Set-Cookie") != "sid=1" {
					t.Errorf("retry after complete = %v (replayed %q), executions %d; want the operator's answer replayed without the route's dropped X-Secret, 1 execution",
						retry, retry.header.Get("Idempotent-Replayed"), up.count("/pay", "complete-me"))
				}
			},
		},
	} {
		// The upstream never answers: 504, the claim is kept.
		if a := pay(c.key, "X-Hang", "1"); a.status != 504 {
			t.Fatalf("%s: hanging write = %v; want 504", c.key, a)
		}
		if a := pay(c.key); a.status != 409 || a.header.Get("Retry-After") != "2" {
			t.Fatalf("%s: retry while claimed = %v; want 409 in progress", c.key, a)
		}
		// The operator computes the key and finds the claim in the list.
		_, kb := adm("POST", "/admin/keys", `{"tenant":"shop-1","identity":{"Authorization":["Bearer client-1"]},"idempotency_key":"`+c.key+`"}`)
		hexKey, _ := kb["key"].(string)
		la, lb := adm("GET", "/admin/claims?older_than=0s", "")
		if la.status != 200 {
			t.Fatalf("list = %v", la)
		}
		found := false
		for _, cl := range lb["claims"].([]any) {
			m := cl.(map[string]any)
			if m["key"] == hexKey && m["route"] == "pay" && m["state"] == "in_flight" {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: key %s not in the list %v", c.key, hexKey, lb)
		}
		if a, ib := adm("GET", "/admin/claims/"+hexKey, ""); a.status != 200 || ib["lease_end"] == nil || ib["fingerprint"] == "" {
			t.Errorf("%s: inspect = %v", c.key, a)
		}
		c.repair(hexKey)
		c.check(pay(c.key))
		if strings.Contains(oa.logs.String(), "Bearer client-1") {
			t.Errorf("an identity value reached the log")
		}
	}
	logs := oa.logs.String()
	for _, want := range []string{`"reason":"INC-1: the PSP shows no charge"`, `"reason":"INC-2: charge ch_9 exists"`, `"action":"release"`, `"action":"complete"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %s", want)
		}
	}
}

// TestAdminListSkipsDamaged (issue 28, item 8): damaged values at record
// keys, written straight into Redis with the store's key layout, no longer
// make GET /admin/claims answer 503: the listing shows the claim it can
// read, reports and counts the damaged ones and logs them. The memory store
// cannot hold a damaged record (its entries are typed values): there the
// listing reports none.
func TestAdminListSkipsDamaged(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"memory", "redis"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			store, prefix, addr := "", e2ePrefix(t), ""
			if backend == "redis" {
				addr = redistest.Addr(t)
				store = redisStoreYAML(addr, prefix)
			}
			up := newCountingUpstream(t)
			token := "admin-token-0123456789abcdef"
			oa := startOpsApp(t, `
upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0}`+store+`
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`, "", &token)
			stuck := keystore.NewKey("stuck")
			if _, err := oa.store.Reserve(t.Context(), stuck, keystore.ReserveOptions{Route: "pay", Lease: time.Minute, Retention: time.Hour}); err != nil {
				t.Fatal(err)
			}
			damaged := 0
			if backend == "redis" {
				rdb := redis.NewClient(&redis.Options{Addr: addr})
				defer rdb.Close()
				for i, write := range []func(key string) error{
					func(key string) error { return rdb.Set(t.Context(), key, "garbage", time.Hour).Err() },
					func(key string) error { return rdb.RPush(t.Context(), key, "x").Err() },
					func(key string) error { return rdb.HSet(t.Context(), key, "v", "9", "st", "1").Err() },
				} {
					if err := write(prefix + "{" + keystore.NewKey(fmt.Sprint("damaged-", i)).String() + "}"); err != nil {
						t.Fatal(err)
					}
					damaged++
				}
			}
			a := doHTTP(t, e2eClient(t), "GET", oa.adminBase+"/admin/claims", "", "Authorization", "Bearer "+token)
			var body struct {
				Claims  []map[string]any `json:"claims"`
				Damaged int              `json:"damaged"`
			}
			json.Unmarshal([]byte(a.body), &body)
			if a.status != 200 || len(body.Claims) != 1 || body.Claims[0]["key"] != stuck.String() || body.Damaged != damaged {
				t.Fatalf("list = %v; want 200 with the stuck claim and damaged %d", a, damaged)
			}
			metrics := doHTTP(t, e2eClient(t), "GET", oa.adminBase+"/metrics", "")
			if want := fmt.Sprintf("idemgate_admin_damaged_records_total %d\n", damaged); !strings.Contains(metrics.body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
			logged := strings.Contains(oa.logs.String(), "admin listing skipped damaged records")
			if logged != (damaged > 0) {
				t.Errorf("damaged records logged: %v; want %v", logged, damaged > 0)
			}
		})
	}
}

// TestAdminDisabled: without a token, /admin/ answers 404 whatever is sent.
func TestAdminDisabled(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	empty := ""
	oa := startOpsApp(t, `upstream: {url: "`+up.URL+`"}`, "", &empty)
	c := e2eClient(t)
	if a := doHTTP(t, c, "GET", oa.adminBase+"/admin/claims", "", "Authorization", "Bearer "); a.status != 404 || !strings.Contains(a.body, "admin_disabled") {
		t.Errorf("disabled admin = %v; want 404 admin_disabled", a)
	}
}

// TestMetricsEndpoint: /metrics serves the app's own registry in the text
// format; after traffic the families are there and lint clean.
func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	oa := startOpsApp(t, `
upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0.001, burst: 1}  # the third request is refused however slow the machine
idempotency: {require_identity: false}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, rate_limit: {requests: 100, per: 1m}}
`, "", nil)
	c := e2eClient(t)
	for range 3 {
		doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", "m1")
	}
	a := doHTTP(t, c, "GET", oa.adminBase+"/metrics", "")
	for _, want := range []string{
		`idemgate_build_info{goversion="go`,
		`idemgate_http_requests_total{code="201",outcome="executed",route="pay"} 1`,
		`idemgate_http_requests_total{code="201",outcome="replayed",route="pay"} 1`,
		`idemgate_limiter_rejections_total{limiter="edge",route="pay"} 1`,
		`idemgate_store_operation_duration_seconds_bucket{op="reserve",le="0.001"}`,
		`idemgate_limiter_evictions_total{limiter="edge"} 0`,
		`go_goroutines`,
		`process_start_time_seconds`,
	} {
		if !strings.Contains(a.body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	problems, err := testutil.GatherAndLint(oa.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "idemgate_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}
