package app

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
)

// TestReloadUnderLoadEveryFormerRestartKey: while eight clients send about
// 2,000 requests a second (keyed writes and reads, on loopback), each key
// that needed a restart before the policy snapshot is changed by a reload,
// one after the other. No request fails, and each change is in force for
// the next request: a keyed write sent right after a tenant change runs
// again (its scope changed), and one after a path_case change to sensitive
// no longer matches a route spelt in another case.
func TestReloadUnderLoadEveryFormerRestartKey(t *testing.T) {
	up := newCountingUpstream(t)
	oa := startOpsApp(t, `upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0}
idempotency: {require_identity: false}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`, "", nil)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(client.CloseIdleConnections)
	send := func(method, path, key string) (int, string, error) {
		req, _ := http.NewRequest(method, oa.base+path, strings.NewReader(`{"n":1}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), nil
	}

	var sent, failed atomic.Int64
	var firstFailure atomic.Pointer[string]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const workers, every = 8, 4 * time.Millisecond // 8 × 250/s
	for w := range workers {
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				key := ""
				if i%2 == 0 {
					key = fmt.Sprintf("load-%d-%d", w, i)
				}
				status, body, err := send("POST", "/pay", key)
				sent.Add(1)
				if err != nil || status != http.StatusCreated {
					failed.Add(1)
					msg := fmt.Sprintf("POST /pay key %q = %d %s %v", key, status, body, err)
					firstFailure.CompareAndSwap(nil, &msg)
				}
			}
		})
	}

	cur := oa.liveConfig()
	apply := func(key string, set func(c *config.Config)) {
		t.Helper()
		next := cloneConfig(t, cur)
		set(next)
		data, err := next.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		oa.applyConfig(data, nil)
		if ch := config.ChangedKeys(cur, oa.liveConfig()); !slices.Contains(ch, key) {
			t.Fatalf("%s: the reload applied %v", key, ch)
		}
		cur = oa.liveConfig()
		time.Sleep(50 * time.Millisecond) // traffic on the new policy
	}
	start := time.Now()
	time.Sleep(200 * time.Millisecond)
	if s, _, _ := send("POST", "/pay", "probe-1"); s != http.StatusCreated {
		t.Fatalf("probe = %d", s)
	}
	apply("idempotency.tenant", func(c *config.Config) { c.Idempotency.Tenant = "shop-2" })
	if s, _, _ := send("POST", "/pay", "probe-1"); s != http.StatusCreated || up.count("/pay", "probe-1") != 2 {
		t.Errorf("the same key right after the tenant change: %d, %d runs; want 201 and a second run (a new scope)", s, up.count("/pay", "probe-1"))
	}
	apply("idempotency.tenant_hosts", func(c *config.Config) {
		c.Idempotency.Tenant, c.Idempotency.TenantHosts = "", map[string]string{"127.0.0.1": "shop-3"}
	})
	apply("path_case", func(c *config.Config) { c.PathCase = config.PathCaseSensitive })
	if s, _, _ := send("POST", "/PAY", "probe-2"); s != http.StatusCreated || up.count("/PAY", "probe-2") != 1 {
		t.Errorf("POST /PAY right after path_case: sensitive = %d; want 201 passed through", s)
	}
	if s, _, _ := send("POST", "/PAY", "probe-2"); s != http.StatusCreated || up.count("/PAY", "probe-2") != 2 {
		t.Errorf("a retry of POST /PAY ran %d times; want 2 (no route: not keyed)", up.count("/PAY", "probe-2"))
	}
	for _, k := range []struct {
		key string
		set func(c *config.Config)
	}{
		{"admin_host", func(c *config.Config) { c.AdminHost = "ops.example.com" }},
		{"max_buffered_bytes", func(c *config.Config) { c.MaxBufferedBytes = 128 << 20 }},
		{"max_buffered_bytes_per_client", func(c *config.Config) { c.MaxBufferedBytesPerClient = 64 << 20 }},
		{"max_connections", func(c *config.Config) { c.MaxConnections = 64 }},
		{"store.memory.max_entries", func(c *config.Config) { c.Store.Memory.MaxEntries = 500_000 }},
		{"store.memory.max_bytes", func(c *config.Config) { c.Store.Memory.MaxBytes = 512 << 20 }},
		{"client_ip.trusted_proxies", func(c *config.Config) { c.ClientIP.TrustedProxies = []string{"10.0.0.0/8"} }},
		{"idempotency.lease", func(c *config.Config) { c.Idempotency.Lease = 90 * time.Second }},
		{"idempotency.max_lease", func(c *config.Config) { c.Idempotency.MaxLease = 30 * time.Minute }},
		{"idempotency.max_response_bytes", func(c *config.Config) { c.Idempotency.MaxResponseBytes = 16 }},
	} {
		apply(k.key, k.set)
	}
	// max_response_bytes: 16 holds for the next keyed write: its answer
	// is over it, so a retry gets 409 response_too_large.
	send("POST", "/pay", "probe-3")
	if s, body, _ := send("POST", "/pay", "probe-3"); s != http.StatusConflict || !strings.Contains(body, "idempotency_response_too_large") {
		t.Errorf("a retry after max_response_bytes: 16 = %d %s; want 409 idempotency_response_too_large", s, body)
	}
	// max_header_bytes: 8192 holds for the next request head.
	apply("max_header_bytes", func(c *config.Config) { c.MaxHeaderBytes = 8192 })
	big, _ := http.NewRequest("GET", oa.base+"/big", nil)
	big.Header.Set("X-Pad", strings.Repeat("p", 9000))
	if res, err := client.Do(big); err != nil || res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("a 9,000-byte header right after max_header_bytes: 8192 = %v, %v; want 431", res, err)
	} else {
		res.Body.Close()
	}
	close(stop)
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d requests in %v (%.0f/s) across 14 reloads", sent.Load(), took.Round(time.Millisecond), float64(sent.Load())/took.Seconds())
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during the reloads; the first: %s", n, sent.Load(), *firstFailure.Load())
	}
}
