package app

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/modes"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// listedMetric is one line of deploy/monitoring/metrics.txt.
type listedMetric struct {
	typ    string
	labels []string
}

// readMetricsList parses deploy/monitoring/metrics.txt, the list of every
// metric idemgate exports.
func readMetricsList(t *testing.T) map[string]listedMetric {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "deploy", "monitoring", "metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]listedMetric{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 {
			t.Fatalf("metrics.txt: %q is not name, type, labels", line)
		}
		m := listedMetric{typ: fs[1]}
		if fs[2] != "-" {
			m.labels = strings.Split(fs[2], ",")
		}
		out[fs[0]] = m
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// scrape GETs a running app's /metrics: the exposition as served, and its
// families.
func scrape(t *testing.T, adminAddr string) ([]byte, map[string]*dto.MetricFamily) {
	t.Helper()
	res, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("GET /metrics = %d, %v", res.StatusCode, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return b, fams
}

// serveForScrape serves a on loopback listeners until the test ends and
// returns the public and admin addresses.
func serveForScrape(t *testing.T, a *App) (public, adminAddr string) {
	t.Helper()
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	public, adminAddr = lns.Public.Addr().String(), lns.Admin.Addr().String()
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- a.Serve(ctx, 5*time.Second, lns) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Error("serve did not return")
		}
	})
	return public, adminAddr
}

// conditional are the families that exist only with one configuration, and
// which.
var conditional = map[string]string{
	"idemgate_memstore_entries":                         "store.backend memory",
	"idemgate_memstore_bytes":                           "store.backend memory",
	"idemgate_memstore_max_entries":                     "store.backend memory",
	"idemgate_memstore_max_bytes":                       "store.backend memory",
	"idemgate_redis_pool_hits_total":                    "store.backend redis",
	"idemgate_redis_pool_misses_total":                  "store.backend redis",
	"idemgate_redis_pool_timeouts_total":                "store.backend redis",
	"idemgate_redis_pool_total_conns":                   "store.backend redis",
	"idemgate_redis_pool_idle_conns":                    "store.backend redis",
	"idemgate_store_pipelines_total":                    "store.backend redis",
	"idemgate_store_pipelined_calls_total":              "store.backend redis",
	"idemgate_store_redis_functions":                    "store.backend redis",
	"idemgate_replay_cache_hits_total":                  "store.backend redis",
	"idemgate_replay_cache_misses_total":                "store.backend redis",
	"idemgate_replay_cache_purges_total":                "store.backend redis",
	"idemgate_replay_cache_entries":                     "store.backend redis",
	"idemgate_replay_cache_bytes":                       "store.backend redis",
	"idemgate_open_cache_hits_total":                    "no replay cache (store.backend memory)",
	"idemgate_open_cache_entries":                       "no replay cache (store.backend memory)",
	"idemgate_open_cache_bytes":                         "no replay cache (store.backend memory)",
	"idemgate_tls_certificate_expiry_timestamp_seconds": "tls.mode files or acme",
	"idemgate_limiter_rejections_total":                 "a rate limit",
	"idemgate_limiter_evictions_total":                  "a rate limit",
}

// pending are listed families another branch registers: remove each once
// it is merged.
var pending = map[string]string{}

// checkAgainstList: every idemgate_ family of fams is listed with its type
// and labels, and every listed family is there unless it belongs to
// another configuration than want's.
func checkAgainstList(t *testing.T, list map[string]listedMetric, fams map[string]*dto.MetricFamily, want func(cond string) bool) {
	t.Helper()
	for name, fam := range fams {
		if !strings.HasPrefix(name, "idemgate_") {
			continue
		}
		l, ok := list[name]
		if !ok {
			t.Errorf("/metrics exports %s, which deploy/monitoring/metrics.txt does not list", name)
			continue
		}
		if typ := strings.ToLower(fam.GetType().String()); typ != l.typ {
			t.Errorf("%s is a %s; metrics.txt says %s", name, typ, l.typ)
		}
		for _, m := range fam.Metric {
			var got []string
			for _, lp := range m.Label {
				got = append(got, lp.GetName())
			}
			slices.Sort(got)
			if want := slices.Sorted(slices.Values(l.labels)); !slices.Equal(got, want) {
				t.Errorf("%s has labels %v; metrics.txt says %v", name, got, l.labels)
				break
			}
		}
	}
	for name := range list {
		if _, ok := fams[name]; ok {
			continue
		}
		if cond, ok := conditional[name]; ok && !want(cond) {
			continue
		}
		if _, ok := pending[name]; ok {
			t.Logf("metrics.txt lists %s, which /metrics does not export yet (%s)", name, pending[name])
			continue
		}
		t.Errorf("metrics.txt lists %s, which /metrics does not export", name)
	}
}

// lint runs client_golang's promlint (the checks of `promtool check
// metrics`) over an exposition.
func lint(t *testing.T, exposition []byte) {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader(exposition)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestMetricsMatchList: a running app (memory store, TLS files, limits,
// sessions, the admin API) exports exactly the families of
// deploy/monitoring/metrics.txt, with their types and labels, before any
// request; the exposition passes promlint; and the series rate() needs
// for the first event exist at 0.
func TestMetricsMatchList(t *testing.T) {
	t.Parallel()
	list := readMetricsList(t)
	ca := tlstest.NewCA(t)
	sec := &tlstest.SecretDir{Dir: t.TempDir()}
	notAfter := time.Now().Add(30 * 24 * time.Hour).Truncate(time.Second)
	c, k := ca.Leaf(t, 1, notAfter)
	sec.Write(t, map[string][]byte{"tls.crt": c, "tls.key": k})
	cfg, err := config.Parse([]byte(`
upstream: {url: "` + echoUpstream(t) + `"}
edge_limit: {rate: 100}
tls: {mode: files, cert_file: ` + filepath.Join(sec.Dir, "tls.crt") + `, key_file: ` + filepath.Join(sec.Dir, "tls.key") + `}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, rate_limit: {requests: 5, per: 1s}}
  - {name: cart, method: PUT, path: "/carts/{id}", idempotent: true, session: {param: id}}
  - {name: read, method: GET, path: "/orders/{id}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// A route with a reconcile probe, for its family; added after Validate,
	// which requires encryption_key_env for it (an environment variable a
	// parallel test cannot set).
	cfg.Routes = append(cfg.Routes, reconcileRoute)
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler), Version: "v-test", Revision: "abc123", AdminToken: "0123456789abcdef0123"})
	if err != nil {
		t.Fatal(err)
	}
	_, adminAddr := serveForScrape(t, a)
	exposition, fams := scrape(t, adminAddr)
	checkAgainstList(t, list, fams, func(cond string) bool { return cond != "store.backend redis" })
	lint(t, exposition)

	for _, s := range []string{
		`idemgate_build_info{goversion="` + runtime.Version() + `",revision="abc123",version="v-test"} 1`,
		`idemgate_tls_certificate_expiry_timestamp_seconds{domain="localhost"} ` + strconv.FormatFloat(float64(notAfter.Unix()), 'g', -1, 64),
		`idemgate_memstore_max_entries 1e+06`,
		`idemgate_http_requests_total{code="503",outcome="unavailable",route="pay"} 0`,
		`idemgate_http_requests_total{code="503",outcome="session_busy",route="cart"} 0`,
		`idemgate_http_requests_total{code="502",outcome="upstream_error",route="read"} 0`,
		`idemgate_http_requests_total{code="429",outcome="rate_limited",route="pay"} 0`,
		`idemgate_limiter_rejections_total{limiter="route",route="pay"} 0`,
		`idemgate_limiter_rejections_total{limiter="edge",route=""} 0`,
		`idemgate_store_errors_total{kind="unavailable",op="reserve"} 0`,
		`idemgate_http_request_duration_seconds_bucket{result="replayed",route="pay",le="0.0001"} 0`,
		`idemgate_session_rejections_total{reason="queue_full"} 0`,
		`idemgate_upstream_requests_total{code="error",route="pay"} 0`,
		`idemgate_claims_in_flight 0`,
	} {
		if !bytes.Contains(exposition, []byte("\n"+s+"\n")) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
}

// reconcileRoute is a route with a reconcile probe, whose family the
// metrics tests need.
var reconcileRoute = config.Route{Name: "order", Method: "POST", Path: "/orders/{id}/pay", Idempotent: true,
	UnknownOutcome: modes.UnknownHold, Reconcile: &config.Reconcile{Path: "/orders/{id}"}}

// TestMetricsMatchListRedis: with the Redis store, the pool's families
// replace the memory store's.
func TestMetricsMatchListRedis(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	list := readMetricsList(t)
	cfg := e2eConfig(t, e2eYAML(echoUpstream(t), addr, e2ePrefix(t), ""))
	cfg.Routes = append(cfg.Routes, reconcileRoute) // see TestMetricsMatchList
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	public, adminAddr := serveForScrape(t, a)
	req, _ := http.NewRequest("POST", "http://"+public+"/pay", strings.NewReader("{}"))
	req.Header.Set("Idempotency-Key", "metrics-list")
	req.Header.Set("Authorization", "Bearer metrics-client") // require_identity
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("POST /pay = %d; want 200", res.StatusCode)
	}
	exposition, fams := scrape(t, adminAddr)
	checkAgainstList(t, list, fams, func(cond string) bool { return cond == "store.backend redis" })
	lint(t, exposition)
	if f := fams["idemgate_redis_pool_total_conns"]; f == nil || f.Metric[0].GetGauge().GetValue() < 1 {
		t.Errorf("idemgate_redis_pool_total_conns = %v; want at least the connection the claim used", f)
	}
}
