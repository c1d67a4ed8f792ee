package app

import (
	"cmp"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore/sealed"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/tlsconf"
	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// keysBase is the config TestEveryKeyReloads starts from: a JWT identity,
// an edge limit, a route limit and a session route, so that each key has a
// running part to reach.
const keysBase = `upstream: {url: "%s"}
admin_host: ops-a.example.com
idempotency:
  require_identity: false
  identity: {jwt: {hmac_secret_env: IDEMGATE_TEST_KEYS_HMAC, algorithms: [HS256]}}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, rate_limit: {requests: 10, per: 1m}}
  - {name: cart, method: PUT, path: "/carts/{id}", idempotent: true, session: id}
`

// keyChange is how TestEveryKeyReloads changes one key, and what it reads
// from the running app to see the new value: got(after) must equal want.
type keyChange struct {
	set  func(c *config.Config)
	got  func(a *opsApp) any
	want any
}

// policy reads the running proxy's policy.
func policy(a *opsApp) proxy.Policy { return a.proxy.Policy() }

// rebuilt reports a running part that a reload builds anew: got is the
// part's address, and want is filled in with "changed" against the one
// before the reload.
const changed = "changed"

// TestEveryKeyReloads walks every key of config.Config: a key on the
// restart list (config.RestartOnly) is skipped; every other one must have
// an entry below, which changes it on a running app through the real
// reload (applyConfig, with a file as valid as the one before) and reads
// the running part the key configures to prove that the new value took
// effect. A key in neither fails with its name: a new key reloads by
// default, and gets its entry here.
func TestEveryKeyReloads(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_KEYS_HMAC", "0123456789abcdef0123456789abcdef")
	t.Setenv("IDEMGATE_TEST_KEYS_HMAC_2", "fedcba9876543210fedcba9876543210fedcba9876543210")
	t.Setenv("IDEMGATE_TEST_KEYS_SEAL", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
	sealKey, _ := sealed.ParseKey("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
	up := newCountingUpstream(t)
	token := "0123456789abcdef-keys"
	oa := startOpsApp(t, fmt.Sprintf(keysBase, up.URL), "", &token)
	signKeys(t)
	jwksFile := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, jwksFile, jwksOf(t, rsa1))
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(jwksOf(t, rsa1))
	}))
	t.Cleanup(idp.Close)
	idem := func(a *opsApp) proxy.Idempotency { return policy(a).Idempotency }
	ident := func(a *opsApp) any { return fmt.Sprintf("%p", policy(a).Identity) }
	edge := func(a *opsApp) any { return fmt.Sprintf("%p", policy(a).Edge) }
	route := func(a *opsApp) proxy.Route { return policy(a).Routes[0] }
	hostAllowed := func(host string) func(a *opsApp) any {
		return func(a *opsApp) any {
			req, _ := http.NewRequest("GET", a.adminBase+"/ui/login", nil)
			req.Host = host
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return err.Error()
			}
			res.Body.Close()
			return res.StatusCode
		}
	}
	filesApp, acmeApp, tlsB := startKeysTLSApps(t, up.URL)
	// The app each tls key is changed on: tls.mode needs a restart, and
	// the other tls keys are refused with mode none.
	tlsApps := map[string]*opsApp{"tls.cert_file": filesApp, "tls.key_file": filesApp}
	for _, k := range []string{"tls.domains", "tls.email", "tls.ca", "tls.ca_root", "tls.on_demand.allow", "tls.storage_dir"} {
		tlsApps[k] = acmeApp
	}
	live := func(get func(c *config.Config) any) func(a *opsApp) any {
		return func(a *opsApp) any { return get(a.liveConfig()) }
	}
	table := map[string]keyChange{
		"admin_host":                    {func(c *config.Config) { c.AdminHost = "ops-b.example.com" }, hostAllowed("ops-b.example.com"), http.StatusOK},
		"max_buffered_bytes":            {func(c *config.Config) { c.MaxBufferedBytes = 100 << 20 }, func(a *opsApp) any { return policy(a).MaxBufferedBytes }, int64(100 << 20)},
		"max_buffered_bytes_per_client": {func(c *config.Config) { c.MaxBufferedBytesPerClient = 8 << 20 }, func(a *opsApp) any { return policy(a).MaxBufferedBytesPerClient }, int64(8 << 20)},
		"max_connections":               {func(c *config.Config) { c.MaxConnections = 77 }, func(a *opsApp) any { return a.conns[0].Limit() }, 77},
		// The listeners' limit, read as each head (and HTTP/2 connection)
		// starts; TestReloadUnderLoadEveryFormerRestartKey and
		// TestMaxHeaderBytesReloadHTTP2 send heads across the change.
		"max_header_bytes":         {func(c *config.Config) { c.MaxHeaderBytes = 32 << 10 }, func(a *opsApp) any { return a.headerLimit.Load() }, 32 << 10},
		"request_body_timeout":     {func(c *config.Config) { c.RequestBodyTimeout = 7 * time.Second }, func(a *opsApp) any { return policy(a).RequestBodyTimeout }, 7 * time.Second},
		"profile":                  {func(c *config.Config) { c.Profile, c.Idempotency.AllowSharedAccounts = config.ProfileStripe, true }, func(a *opsApp) any { return policy(a).StripeShouldRetry }, true},
		"request_id_header":        {func(c *config.Config) { c.RequestIDHeader = "X-Trace-Id" }, func(a *opsApp) any { return a.proxy.RequestIDHeader() }, "X-Trace-Id"},
		"upstream.url":             {func(c *config.Config) { c.Upstream.URL = "http://127.0.0.1:1/api" }, func(a *opsApp) any { return policy(a).Upstream.URL.String() }, "http://127.0.0.1:1/api"},
		"upstream.timeout":         {func(c *config.Config) { c.Upstream.Timeout = 42 * time.Second }, func(a *opsApp) any { return policy(a).Upstream.Timeout }, 42 * time.Second},
		"upstream.host":            {func(c *config.Config) { c.Upstream.Host = config.HostUpstream }, func(a *opsApp) any { return policy(a).Upstream.Host }, true},
		"store.memory.max_entries": {func(c *config.Config) { c.Store.Memory.MaxEntries = 4242 }, func(a *opsApp) any { n, _ := a.built.mem.Limits(); return n }, 4242},
		"store.memory.max_bytes":   {func(c *config.Config) { c.Store.Memory.MaxBytes = 64 << 20 }, func(a *opsApp) any { _, n := a.built.mem.Limits(); return n }, int64(64 << 20)},
		// The memory store has no record format: the key reaches the
		// running config, and redisstore.SetRecordFormat with Redis
		// (TestRecordFormatReload).
		// Every Redis client and the store's pipeline read it
		// (TestReloadRedisTimeoutE2E shows a call bounded by it).
		// The sealing store's key (TestReloadEncryptionKeyEnv writes and
		// replays across the change).
		"idempotency.encryption_key_env": {func(c *config.Config) { c.Idempotency.EncryptionKeyEnv = "IDEMGATE_TEST_KEYS_SEAL" }, func(a *opsApp) any {
			id, ok := a.built.sealed.Sealing()
			return fmt.Sprint(id, ok)
		}, fmt.Sprint(sealKey.ID(), true)},
		"store.redis.timeout":       {func(c *config.Config) { c.Store.Redis.Timeout = 1234 * time.Millisecond }, func(a *opsApp) any { return a.redisTimeout.Load() }, 1234 * time.Millisecond},
		"store.redis.record_format": {func(c *config.Config) { c.Store.Redis.RecordFormat = config.RecordHash }, live(func(c *config.Config) any { return c.Store.Redis.RecordFormat }), config.RecordHash},
		// The tls keys, on apps with tls.mode files and acme: each reaches
		// the certificate source that a reload rebuilt (TestTLSReloadFiles
		// and TestTLSReloadACME prove that new handshakes use it).
		"tls.cert_file": {func(c *config.Config) { c.TLS.CertFile = tlsB.cert }, func(a *opsApp) any { c, _ := tlsSrc(a).files.Paths(); return c }, tlsB.cert},
		"tls.key_file":  {func(c *config.Config) { c.TLS.KeyFile = tlsB.key }, func(a *opsApp) any { _, k := tlsSrc(a).files.Paths(); return k }, tlsB.key},
		"tls.domains":   {func(c *config.Config) { c.TLS.Domains = []string{"B.example"} }, func(a *opsApp) any { return fmt.Sprint(acmeOpts(a).Domains) }, "[b.example]"},
		"tls.email":     {func(c *config.Config) { c.TLS.Email = "ops@b.example" }, func(a *opsApp) any { return acmeOpts(a).Email }, "ops@b.example"},
		"tls.ca":        {func(c *config.Config) { c.TLS.CA = "https://127.0.0.1:2/b" }, func(a *opsApp) any { return acmeOpts(a).CA }, "https://127.0.0.1:2/b"},
		"tls.ca_root":   {func(c *config.Config) { c.TLS.CARoot = tlsB.root }, func(a *opsApp) any { return acmeOpts(a).Roots.Equal(tlsB.roots) }, true},
		"tls.on_demand.allow": {func(c *config.Config) { c.TLS.OnDemand.Allow = []string{".b.example"} }, func(a *opsApp) any {
			return fmt.Sprint(acmeOpts(a).OnDemand.Allows("x.b.example"), acmeOpts(a).OnDemand.Allows("x.a.example"))
		}, "true false"},
		"tls.storage_dir": {func(c *config.Config) { c.TLS.StorageDir = tlsB.storage }, func(a *opsApp) any {
			fs, _ := acmeOpts(a).Storage.(*certmagic.FileStorage)
			return fs.Path
		}, tlsB.storage},
		"store.compression":         {func(c *config.Config) { c.Store.Compression = config.CompressionZstd }, func(a *opsApp) any { return a.built.compressed.Options().Compress }, true},
		"client_ip.trusted_proxies": {func(c *config.Config) { c.ClientIP.TrustedProxies = []string{"10.0.0.0/8"} }, func(a *opsApp) any { return fmt.Sprint(policy(a).TrustedProxies) }, "[10.0.0.0/8]"},
		"edge_limit.rate":           {func(c *config.Config) { c.EdgeLimit.Rate = 0 }, func(a *opsApp) any { return policy(a).Edge == nil }, true},
		"edge_limit.burst":          {func(c *config.Config) { c.EdgeLimit.Rate, c.EdgeLimit.Burst = 50, 3 }, edge, changed},
		"limiter.max_clients":       {func(c *config.Config) { c.Limiter.MaxClients = 1234 }, edge, changed},
		"limiter.ietf_headers":      {func(c *config.Config) { c.Limiter.IETFHeaders = !c.Limiter.IETFHeaders }, func(a *opsApp) any { return policy(a).IETFHeaders }, true},
		"idempotency.header":        {func(c *config.Config) { c.Idempotency.Header = "X-Idem-Key" }, func(a *opsApp) any { return idem(a).Header }, "X-Idem-Key"},
		// The old spelling of identity.headers, which loading folds into
		// it: it reloads as that key (keyAliases).
		"idempotency.identity_headers":    {func(c *config.Config) { c.Idempotency.Identity.Headers = []string{"X-User"} }, ident, changed},
		"idempotency.identity.headers":    {func(c *config.Config) { c.Idempotency.Identity.Headers = []string{"X-Shop"} }, ident, changed},
		"idempotency.identity.cookies":    {func(c *config.Config) { c.Idempotency.Identity.Cookies = []string{"sid"} }, ident, changed},
		"idempotency.identity.jwt.header": {func(c *config.Config) { c.Idempotency.Identity.JWT.Header = "X-Token" }, ident, changed},
		"idempotency.identity.jwt.cookie": {func(c *config.Config) {
			c.Idempotency.Identity.JWT.Header, c.Idempotency.Identity.JWT.Cookie = "", "tok"
		}, ident, changed},
		"idempotency.identity.jwt.claims": {func(c *config.Config) { c.Idempotency.Identity.JWT.Claims = []string{"sub", "org"} }, ident, changed},
		"idempotency.identity.jwt.jwks_file": {func(c *config.Config) {
			j := &c.Idempotency.Identity.JWT
			j.HMACSecretEnv, j.JWKSFile, j.Algorithms = "", jwksFile, []string{"RS256"}
		}, ident, changed},
		"idempotency.identity.jwt.jwks_url": {func(c *config.Config) {
			j := &c.Idempotency.Identity.JWT
			j.JWKSFile, j.JWKSURL = "", idp.URL+"/jwks.json"
		}, ident, changed},
		"idempotency.identity.jwt.hmac_secret_env": {func(c *config.Config) {
			j := &c.Idempotency.Identity.JWT
			j.JWKSURL, j.HMACSecretEnv, j.Algorithms = "", "IDEMGATE_TEST_KEYS_HMAC_2", []string{"HS256"}
		}, ident, changed},
		"idempotency.identity.jwt.issuers":    {func(c *config.Config) { c.Idempotency.Identity.JWT.Issuers = []string{"https://issuer.example"} }, ident, changed},
		"idempotency.identity.jwt.audiences":  {func(c *config.Config) { c.Idempotency.Identity.JWT.Audiences = []string{"api"} }, ident, changed},
		"idempotency.identity.jwt.algorithms": {func(c *config.Config) { c.Idempotency.Identity.JWT.Algorithms = []string{"HS256", "HS384"} }, ident, changed},
		"idempotency.identity.jwt.leeway":     {func(c *config.Config) { c.Idempotency.Identity.JWT.Leeway = 3 * time.Second }, ident, changed},
		"idempotency.require_identity":        {func(c *config.Config) { c.Idempotency.RequireIdentity = true }, func(a *opsApp) any { return policy(a).RequireIdentity }, true},
		"idempotency.tenant":                  {func(c *config.Config) { c.Idempotency.Tenant = "shop-1" }, func(a *opsApp) any { t, _ := idem(a).TenantFor("any.example"); return t }, "shop-1"},
		"idempotency.tenant_hosts": {func(c *config.Config) {
			c.Idempotency.Tenant, c.Idempotency.TenantHosts = "", map[string]string{"a.example": "shop-a"}
		}, func(a *opsApp) any {
			t, ok := idem(a).TenantFor("a.example")
			_, other := idem(a).TenantFor("b.example")
			return fmt.Sprintf("%s %v %v", t, ok, other)
		}, "shop-a true false"},
		"idempotency.retention":          {func(c *config.Config) { c.Idempotency.Retention = 30 * time.Hour }, func(a *opsApp) any { return idem(a).Retention }, 30 * time.Hour},
		"idempotency.lease":              {func(c *config.Config) { c.Idempotency.Lease = 90 * time.Second }, func(a *opsApp) any { return idem(a).Lease }, 90 * time.Second},
		"idempotency.max_lease":          {func(c *config.Config) { c.Idempotency.MaxLease = 70 * time.Minute }, func(a *opsApp) any { return idem(a).MaxLease }, 70 * time.Minute},
		"idempotency.max_body_bytes":     {func(c *config.Config) { c.Idempotency.MaxBodyBytes = 2 << 20 }, func(a *opsApp) any { return idem(a).MaxBodyBytes }, int64(2 << 20)},
		"idempotency.max_response_bytes": {func(c *config.Config) { c.Idempotency.MaxResponseBytes = 128 << 10 }, func(a *opsApp) any { return idem(a).MaxResponseBytes }, int64(128 << 10)},
		"idempotency.replay_header":      {func(c *config.Config) { c.Idempotency.ReplayHeader = "X-Replayed" }, func(a *opsApp) any { return idem(a).ReplayHeader }, "X-Replayed"},
		"idempotency.reuse_status":       {func(c *config.Config) { c.Idempotency.ReuseStatus = 422 }, func(a *opsApp) any { return idem(a).ReuseStatus }, 422},
		"idempotency.release_statuses":   {func(c *config.Config) { c.Idempotency.ReleaseStatuses = []int{500} }, func(a *opsApp) any { return fmt.Sprint(idem(a).ReleaseStatuses) }, "[500]"},
		"idempotency.drop_headers":       {func(c *config.Config) { c.Idempotency.DropHeaders = []string{"Set-Cookie"} }, func(a *opsApp) any { return fmt.Sprint(idem(a).DropHeaders) }, "[Set-Cookie]"},
		"idempotency.in_progress":        {func(c *config.Config) { c.Idempotency.InProgress = "wait" }, func(a *opsApp) any { return idem(a).InProgress }, "wait"},
		"idempotency.wait_timeout":       {func(c *config.Config) { c.Idempotency.WaitTimeout = 4 * time.Second }, func(a *opsApp) any { return idem(a).WaitTimeout }, 4 * time.Second},
		"idempotency.late_answer_wait":   {func(c *config.Config) { c.Idempotency.LateAnswerWait = time.Minute }, func(a *opsApp) any { return idem(a).LateAnswerWait }, time.Minute},
		"idempotency.late_answer_max":    {func(c *config.Config) { c.Idempotency.LateAnswerMax = 9 }, func(a *opsApp) any { return idem(a).LateAnswerMax }, 9},
		"idempotency.unknown_outcome":    {func(c *config.Config) { c.Idempotency.UnknownOutcome = "hold" }, func(a *opsApp) any { return idem(a).UnknownOutcome }, "hold"},
		"idempotency.max_waiters":        {func(c *config.Config) { c.Idempotency.MaxWaiters = 5 }, func(a *opsApp) any { return idem(a).MaxWaiters }, 5},
		"idempotency.key_syntax":         {func(c *config.Config) { c.Idempotency.KeySyntax = "printable" }, func(a *opsApp) any { return idem(a).KeySyntax }, proxy.KeyPrintable},
		// A validation rule of profile stripe only: it reaches the running
		// config, and nothing else reads it.
		"idempotency.allow_shared_accounts": {func(c *config.Config) {
			c.Idempotency.AllowSharedAccounts = false
			c.Idempotency.Identity.Headers = []string{"Stripe-Account"}
		}, live(func(c *config.Config) any { return c.Idempotency.AllowSharedAccounts }), false},
		"sessions.queue_depth":   {func(c *config.Config) { c.Sessions.QueueDepth = 9 }, func(a *opsApp) any { return fmt.Sprintf("%p", policy(a).Sessions) }, changed},
		"sessions.queue_timeout": {func(c *config.Config) { c.Sessions.QueueTimeout = 9 * time.Second }, func(a *opsApp) any { return fmt.Sprintf("%p", policy(a).Sessions) }, changed},
		"sessions.lease":         {func(c *config.Config) { c.Sessions.Lease = 9 * time.Second }, func(a *opsApp) any { return fmt.Sprintf("%p", policy(a).Sessions) }, changed},
		"mode": {func(c *config.Config) {
			c.Mode = config.ModeObserve
			for i := range c.Routes {
				c.Routes[i].Mode = "" // the effective YAML writes each route's
			}
		}, func(a *opsApp) any { return route(a).Observe }, true},
		"path_case": {func(c *config.Config) { c.PathCase = config.PathCaseSensitive }, func(a *opsApp) any { return fmt.Sprint(policy(a).PathCase) }, fmt.Sprint(mustPathCase(t, config.PathCaseSensitive))},
		// Methods routes may name: a route with one reaches the policy.
		"extra_methods": {func(c *config.Config) {
			c.ExtraMethods = []string{"PURGE"}
			c.Routes = append(c.Routes, config.Route{Name: "purge", Method: "PURGE", Path: "/cache"})
		}, func(a *opsApp) any { return policy(a).Routes[len(policy(a).Routes)-1].Method }, "PURGE"},
		"routes":              {func(c *config.Config) { c.Routes[0].Path = "/payments" }, func(a *opsApp) any { return route(a).Path }, "/payments"},
		"errors.codes":        {func(c *config.Config) { c.Errors.Codes = map[string]string{"rate_limited": "too_many"} }, func(a *opsApp) any { return policy(a).Errors.Codes["rate_limited"] }, "too_many"},
		"errors.content_type": {func(c *config.Config) { c.Errors.ContentType = "application/json" }, func(a *opsApp) any { return policy(a).Errors.ContentType }, "application/json"},
		"errors.body":         {func(c *config.Config) { c.Errors.Body = `{"error":{{json .Code}}}` }, func(a *opsApp) any { return policy(a).Errors.Body }, `{"error":{{json .Code}}}`},
		"errors.extensions":   {func(c *config.Config) { c.Errors.Extensions = `{"docs":"https://docs.example"}` }, func(a *opsApp) any { return policy(a).Errors.Extensions }, `{"docs":"https://docs.example"}`},
	}

	for key := range table {
		if config.RestartOnly(key) || !slices.Contains(config.Keys(), key) {
			t.Errorf("table entry %q: the key needs a restart or does not exist; remove the entry", key)
		}
	}
	for _, key := range config.Keys() {
		if config.RestartOnly(key) {
			continue
		}
		tc, ok := table[key]
		if !ok {
			t.Errorf("%s: neither on the restart list (config.RestartOnly) nor in this test's table: add an entry that changes it on reload and reads it back", key)
			continue
		}
		oa := cmp.Or(tlsApps[key], oa)
		before := tc.got(oa)
		cur := oa.liveConfig()
		next := cloneConfig(t, cur)
		tc.set(next)
		data, err := next.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		oa.applyConfig(data, nil)
		if ch := config.ChangedKeys(cur, oa.liveConfig()); !slices.Contains(ch, cmp.Or(keyAliases[key], key)) {
			logs := strings.Split(strings.TrimSpace(oa.logs.String()), "\n")
			t.Errorf("%s: the reload did not apply it (changed %v); the last log line:\n%s", key, ch, logs[len(logs)-1])
			continue
		}
		got, want := tc.got(oa), tc.want
		if want == changed {
			if got == before {
				t.Errorf("%s: the running part was not rebuilt (still %v)", key, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the running value is %#v after the reload; want %#v", key, got, want)
		}
	}
}

// keyAliases are old spellings of keys, which loading folds into the key
// they name: they reload as that key.
var keyAliases = map[string]string{"idempotency.identity_headers": "idempotency.identity.headers"}

// cloneConfig is a deep copy of c, through its YAML.
func cloneConfig(t *testing.T, c *config.Config) *config.Config {
	t.Helper()
	data, err := c.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	next, err := parseConfig(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	return next
}

func mustPathCase(t *testing.T, s string) any {
	c := config.Default()
	c.PathCase = s
	pc, err := c.PathCaseOption()
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

// tlsKeysB are the second values TestEveryKeyReloads gives the tls keys.
type tlsKeysB struct {
	cert, key, root, storage string
	roots                    *x509.CertPool // the system roots and root
}

// startKeysTLSApps starts an app with tls.mode files and one with acme
// (on demand only, with a CA that is never asked: nothing is obtained) for
// TestEveryKeyReloads, and prepares the tls keys' second values: a copy
// of the pair under other names, a root file and a storage directory.
func startKeysTLSApps(t *testing.T, upstream string) (files, acme *opsApp, b tlsKeysB) {
	t.Helper()
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	crt, key := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certA, keyA := write("a.crt", crt), write("a.key", key)
	b = tlsKeysB{cert: write("b.crt", crt), key: write("b.key", key), root: write("root-b.pem", crt), storage: filepath.Join(dir, "certs-b")}
	var err error
	if b.roots, err = x509.SystemCertPool(); err != nil {
		b.roots = x509.NewCertPool()
	}
	b.roots.AppendCertsFromPEM(crt)
	base := `upstream: {url: "` + upstream + `"}
idempotency: {require_identity: false}
`
	files = startOpsApp(t, base+`tls: {mode: files, cert_file: `+certA+`, key_file: `+keyA+`, http_listen: ""}
`, "", nil)
	acme = startOpsApp(t, base+`tls:
  mode: acme
  ca: "https://127.0.0.1:1/a"
  email: ops@a.example
  storage_dir: `+filepath.Join(dir, "certs-a")+`
  http_listen: "127.0.0.1:0"
  on_demand: {allow: [".a.example"]}
`, "", nil)
	return files, acme, b
}

// tlsSrc is a's running certificate source.
func tlsSrc(a *opsApp) *tlsSource { return a.tls.cur.Load() }

// acmeOpts are the options of a's running ACME manager.
func acmeOpts(a *opsApp) tlsconf.ACMEOptions { return tlsSrc(a).acme.Options() }
