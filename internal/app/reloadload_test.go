package app

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/modes"
	"github.com/idemgate/idemgate/proxy"
)

// formerRestartOnly are the keys that needed a restart before the policy
// snapshot (issue 29, at 2b68293) and reload live now: each is changed
// under load below.
var formerRestartOnly = []string{
	"admin_host", "max_buffered_bytes", "max_buffered_bytes_per_client", "max_connections",
	"profile", "request_id_header", "store.memory.max_entries", "store.memory.max_bytes",
	"store.compression", "client_ip.trusted_proxies", "idempotency.tenant", "idempotency.tenant_hosts",
	"idempotency.lease", "idempotency.max_lease", "idempotency.max_response_bytes",
	"idempotency.late_answer_wait", "idempotency.late_answer_max", "idempotency.unknown_outcome",
	"idempotency.max_waiters", "idempotency.key_syntax", "idempotency.allow_shared_accounts",
	"path_case", "extra_methods", "store.redis.timeout", "idempotency.encryption_key_env", "max_header_bytes",
	// The tls.* keys but mode and http_listen reload live too; they are
	// changed while TLS clients connect in TestTLSReloadFiles.
}

// TestReloadUnderLoadEveryFormerRestartKey: while ten clients send up to
// 2,500 requests a second (keyed writes and reads, on loopback), each key
// that needed a restart before the policy snapshot (formerRestartOnly) is
// changed by a reload, one after the other. No request fails, and each change is in force for
// the next request: a keyed write sent right after a tenant change runs
// again (its scope changed), and one after a path_case change to sensitive
// no longer matches a route spelt in another case.
func TestReloadUnderLoadEveryFormerRestartKey(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_LOAD_SEAL", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=") // not parallel
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

	// up to 10 × 250/s: 2,000/s or more, less what each request takes
	ld := startLoad(10, 4*time.Millisecond, func(w, i int) (bool, string) {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("load-%d-%d", w, i)
		}
		status, body, err := send("POST", "/pay", key)
		return err == nil && status == http.StatusCreated, fmt.Sprintf("POST /pay key %q = %d %s %v", key, status, body, err)
	})

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
	// max_header_bytes: a keep-alive connection opened before the reload
	// has the new limit from its next head on, exactly, lowered or raised
	// (over TLS and HTTP/2: TestMaxHeaderBytesReloadHTTP2).
	dialPlain := func() (net.Conn, error) { return net.Dial("tcp", strings.TrimPrefix(oa.base, "http://")) }
	kept := dialRaw(t, dialPlain)
	if s := kept.send(h1Head(t, "/h-before", 20000)); s != http.StatusCreated {
		t.Errorf("a head of 20,000 bytes under 65,536 = %d", s)
	}
	apply("max_header_bytes", func(c *config.Config) { c.MaxHeaderBytes = 16 << 10 })
	if s := kept.send(h1Head(t, "/h-at", 16<<10)); s != http.StatusCreated {
		t.Errorf("after lowering to 16,384, a head of 16,384 on a connection opened before = %d; want 201", s)
	}
	if s := kept.send(h1Head(t, "/h-over", 16<<10+1)); s != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("after lowering to 16,384, a head of 16,385 on a connection opened before = %d; want 431", s)
	}
	kept = dialRaw(t, dialPlain)
	if s := kept.send(h1Head(t, "/h-before-raise", 16<<10)); s != http.StatusCreated {
		t.Errorf("a head of 16,384 under 16,384 = %d", s)
	}
	apply("max_header_bytes", func(c *config.Config) { c.MaxHeaderBytes = 32 << 10 })
	if s := kept.send(h1Head(t, "/h-raised", 32<<10)); s != http.StatusCreated {
		t.Errorf("after raising to 32,768, a head of 32,768 on a connection opened before = %d; want 201", s)
	}
	if s := dialRaw(t, dialPlain).send(h1Head(t, "/h-raised-over", 32<<10+1)); s != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("after raising to 32,768, a head of 32,769 = %d; want 431", s)
	}
	// Each of the other former restart-only keys: a load-safe change, and
	// what the next request (or, for a key no plain request shows, the
	// policy the next request starts with) must see.
	header := func(name string) func() error {
		return func() error {
			req, _ := http.NewRequest("GET", oa.base+"/", nil)
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.Header.Get(name) == "" {
				return fmt.Errorf("the next answer has no %s", name)
			}
			return nil
		}
	}
	keyedBody := func(key, body string, want int, wantHeader string) func() error {
		return func() error {
			req, _ := http.NewRequest("POST", oa.base+"/pay", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			res.Body.Close()
			if res.StatusCode != want || wantHeader != "" && res.Header.Get(wantHeader) == "" {
				return fmt.Errorf("POST /pay with key %q = %d %v; want %d with %s", key, res.StatusCode, res.Header, want, wantHeader)
			}
			return nil
		}
	}
	keyed := func(key string, want int, wantHeader string) func() error {
		return keyedBody(key, `{"n":1}`, want, wantHeader)
	}
	inPolicy := func(got func() any, want any) func() error {
		return func() error {
			if g := got(); g != want {
				return fmt.Errorf("the running policy has %v; want %v", g, want)
			}
			return nil
		}
	}
	idem := func() proxy.Idempotency { return oa.proxy.Policy().Idempotency }
	changes := []struct {
		key   string
		set   func(c *config.Config)
		check func() error // nil: the reload's ChangedKeys is the proof
	}{
		{"admin_host", func(c *config.Config) { c.AdminHost = "ops.example.com" }, nil},
		{"max_buffered_bytes", func(c *config.Config) { c.MaxBufferedBytes = 128 << 20 }, nil},
		{"max_buffered_bytes_per_client", func(c *config.Config) { c.MaxBufferedBytesPerClient = 64 << 20 }, nil},
		{"max_connections", func(c *config.Config) { c.MaxConnections = 64 }, func() error {
			if n := oa.conns[0].Limit(); n != 64 {
				return fmt.Errorf("the listener's limit is %d", n)
			}
			return nil
		}},
		{"store.memory.max_entries", func(c *config.Config) { c.Store.Memory.MaxEntries = 500_000 }, nil},
		{"store.memory.max_bytes", func(c *config.Config) { c.Store.Memory.MaxBytes = 512 << 20 }, nil},
		{"store.compression", func(c *config.Config) { c.Store.Compression = config.CompressionZstd }, func() error {
			if !oa.built.compressed.Options().Compress {
				return fmt.Errorf("the store does not compress")
			}
			return keyed("probe-zstd", http.StatusCreated, "")()
		}},
		{"client_ip.trusted_proxies", func(c *config.Config) { c.ClientIP.TrustedProxies = []string{"10.0.0.0/8"} }, nil},
		{"request_id_header", func(c *config.Config) { c.RequestIDHeader = "X-Trace-Id" }, header("X-Trace-Id")},
		{"profile", func(c *config.Config) { c.Profile, c.Idempotency.AllowSharedAccounts = config.ProfileStripe, true },
			// The proxy's own refusals of a reused key carry
			// Stripe-Should-Retry.
			func() error {
				if err := keyed("probe-stripe", http.StatusCreated, "")(); err != nil {
					return err
				}
				// reuse_status stays 409: the effective YAML sets it.
				return keyedBody("probe-stripe", `{"n":2}`, http.StatusConflict, "Stripe-Should-Retry")()
			}},
		{"idempotency.allow_shared_accounts", func(c *config.Config) {
			c.Idempotency.AllowSharedAccounts = false
			c.Idempotency.Identity.Headers = []string{"Stripe-Account"}
		}, nil},
		{"idempotency.key_syntax", func(c *config.Config) { c.Idempotency.KeySyntax = modes.KeySyntaxPrintable },
			keyed("a key with spaces", http.StatusCreated, "")},
		{"idempotency.lease", func(c *config.Config) { c.Idempotency.Lease = 90 * time.Second },
			inPolicy(func() any { return idem().Lease }, 90*time.Second)},
		{"idempotency.max_lease", func(c *config.Config) { c.Idempotency.MaxLease = 30 * time.Minute },
			inPolicy(func() any { return idem().MaxLease }, 30*time.Minute)},
		{"idempotency.late_answer_wait", func(c *config.Config) { c.Idempotency.LateAnswerWait = time.Minute },
			inPolicy(func() any { return idem().LateAnswerWait }, time.Minute)},
		{"idempotency.late_answer_max", func(c *config.Config) { c.Idempotency.LateAnswerMax = 9 },
			inPolicy(func() any { return idem().LateAnswerMax }, 9)},
		{"idempotency.unknown_outcome", func(c *config.Config) { c.Idempotency.UnknownOutcome = "hold" },
			inPolicy(func() any { return idem().UnknownOutcome }, "hold")},
		{"idempotency.max_waiters", func(c *config.Config) { c.Idempotency.MaxWaiters = 5 },
			inPolicy(func() any { return idem().MaxWaiters }, 5)},
		{"extra_methods", func(c *config.Config) {
			c.ExtraMethods = []string{"PURGE"}
			c.Routes = append(c.Routes, config.Route{Name: "purge", Method: "PURGE", Path: "/cache"})
		}, inPolicy(func() any { r := oa.proxy.Policy().Routes; return r[len(r)-1].Method }, "PURGE")},
		{"store.redis.timeout", func(c *config.Config) { c.Store.Redis.Timeout = 1234 * time.Millisecond },
			inPolicy(func() any { return oa.redisTimeout.Load() }, 1234*time.Millisecond)},
		// Sealing on: the next write's answer is sealed, and replays.
		{"idempotency.encryption_key_env", func(c *config.Config) { c.Idempotency.EncryptionKeyEnv = "IDEMGATE_TEST_LOAD_SEAL" }, func() error {
			if _, ok := oa.built.sealed.Sealing(); !ok {
				return fmt.Errorf("the store does not seal")
			}
			if err := keyed("probe-sealed", http.StatusCreated, "")(); err != nil {
				return err
			}
			return keyed("probe-sealed", http.StatusCreated, "Idempotent-Replayed")()
		}},
		{"idempotency.max_response_bytes", func(c *config.Config) { c.Idempotency.MaxResponseBytes = 16 }, nil},
	}
	done := []string{"idempotency.tenant", "idempotency.tenant_hosts", "path_case", "max_header_bytes"}
	for _, k := range changes {
		apply(k.key, k.set)
		if k.check != nil {
			if err := k.check(); err != nil {
				t.Errorf("%s, the next request: %v", k.key, err)
			}
		}
		done = append(done, k.key)
	}
	// max_response_bytes: 16 holds for the next keyed write: its answer
	// is over it, so a retry gets 409 response_too_large.
	send("POST", "/pay", "probe-3")
	if s, body, _ := send("POST", "/pay", "probe-3"); s != http.StatusConflict || !strings.Contains(body, "idempotency_response_too_large") {
		t.Errorf("a retry after max_response_bytes: 16 = %d %s; want 409 idempotency_response_too_large", s, body)
	}
	for _, k := range formerRestartOnly {
		if config.RestartOnly(k) {
			t.Errorf("%s is on the restart list again: remove it from formerRestartOnly", k)
		}
		if !slices.Contains(done, k) {
			t.Errorf("former restart-only key %s is not changed under load here", k)
		}
	}
	ld.stop(t, fmt.Sprintf("requests across %d reloads", len(done)))
}
