package app

import (
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/internal/testutil"
)

// TestConsoleOnAdminListener: /ui/ is served on the admin listener when a
// token is set (404 without), answers a Host of admin_host, refuses
// another, and its login page is the console's (CSP set).
func TestConsoleOnAdminListener(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	yaml := reloadYAML(up.URL, "", "admin_host: idemgate-admin.example.com")
	off := startOpsApp(t, yaml, "", nil)
	if a := doHTTP(t, http.DefaultClient, "GET", off.adminBase+"/ui/login", ""); a.status != http.StatusNotFound {
		t.Errorf("without a token GET /ui/login = %d; want 404", a.status)
	}
	tok := "console-app-test-token-0123456789"
	oa := startOpsApp(t, yaml, "", &tok)
	for _, tc := range []struct {
		host string
		want int
	}{
		{"", http.StatusOK},
		{"idemgate-admin.example.com:9090", http.StatusOK},
		{"attacker.example.com", http.StatusForbidden},
	} {
		req, _ := http.NewRequest("GET", oa.adminBase+"/ui/login", nil)
		if tc.host != "" {
			req.Host = tc.host
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("Host %q: GET /ui/login = %d; want %d", tc.host, res.StatusCode, tc.want)
		}
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("Host %q: CSP %q", tc.host, csp)
		}
	}
}

// TestConsoleConfigRevision: the console shows revision 1 at start, 2
// after a reload that applied, and a refused reload's problems with the
// revision kept.
func TestConsoleConfigRevision(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	v1 := reloadYAML(up.URL, "", "")
	oa, km := startWatched(t, v1)
	tok := "console-app-test-token-0123456789"
	oa.setAdminToken(tok)
	if st := oa.configStatus(); st.Revision != 1 || !st.LastReload.IsZero() {
		t.Fatalf("at start: %+v; want revision 1, no reload", st)
	}
	km.update(t, reloadYAML(up.URL, ordersRoute, ""))
	oa.waitRoutes(t, "pay", "orders")
	testutil.Eventually(t, 10*time.Second, "revision 2", func() bool { return oa.configStatus().Revision == 2 })
	st := oa.configStatus()
	if st.LastResult != "applied" || len(st.Digest) != 12 {
		t.Errorf("after a reload: %+v; want applied with a digest", st)
	}
	km.update(t, reloadYAML(up.URL, ordersRoute, "")+"  - {name: pay, method: POST, path: /dup, idempotent: true}\n")
	testutil.Eventually(t, 10*time.Second, "a refused reload", func() bool { return oa.configStatus().LastResult == "refused" })
	if st := oa.configStatus(); st.Revision != 2 || len(st.LastProblems) == 0 {
		t.Errorf("after a refused reload: %+v; want revision 2 and the problems", st)
	}

	// The page shows it, to a logged-in operator.
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	req, _ := http.NewRequest("POST", oa.adminBase+"/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", oa.adminBase)
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	page := doHTTP(t, c, "GET", oa.adminBase+"/ui/", "")
	for _, want := range []string{"refused", "also the name of routes[0]", "<td>pay</td>", "<td>orders</td>"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("the overview lacks %q:\n%s", want, page.body)
		}
	}
}

// TestLimitClientsE2E: a route limit's refusals are counted by client and
// listed by GET /admin/limits/clients (behind the token): 3 of 10 requests
// from 127.0.0.1 pass the window, 7 are refused, counted exactly; passes
// are sampled, so requests is 7 plus a multiple of 32.
func TestLimitClientsE2E(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	yaml := reloadYAML(up.URL, `  - {name: get_cart, method: GET, path: "/carts/{id}", rate_limit: {requests: 3, per: 60s, algorithm: window}}
`, "")
	tok := "console-app-test-token-0123456789"
	oa := startOpsApp(t, yaml, "", &tok)
	for i := range 10 {
		want := http.StatusCreated
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if a := doHTTP(t, http.DefaultClient, "GET", oa.base+"/carts/c1", ""); a.status != want {
			t.Fatalf("request %d = %v; want %d", i, a, want)
		}
	}
	if a := doHTTP(t, http.DefaultClient, "GET", oa.adminBase+"/admin/limits/clients", ""); a.status != http.StatusUnauthorized {
		t.Errorf("without the token = %v; want 401", a)
	}
	a := doHTTP(t, http.DefaultClient, "GET", oa.adminBase+"/admin/limits/clients", "", "Authorization", "Bearer "+tok)
	if a.status != http.StatusOK {
		t.Fatalf("GET /admin/limits/clients = %v; want 200", a)
	}
	var got struct {
		Limiters []admin.LimiterClients `json:"limiters"`
	}
	if err := json.Unmarshal([]byte(a.body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Limiters) != 1 || got.Limiters[0].Limiter != "route" || got.Limiters[0].Route != "get_cart" || len(got.Limiters[0].Clients) != 1 {
		t.Fatalf("limiters = %+v; want the get_cart route's, with one client", got.Limiters)
	}
	c := got.Limiters[0].Clients[0]
	if c.Client != "127.0.0.1/32" || c.Refused != 7 || c.Requests < 7 || (c.Requests-7)%32 != 0 || c.MaxOvercount != 0 {
		t.Errorf("client = %+v; want 127.0.0.1/32, 7 refused, 7 + 32n requests, no over-count", c)
	}
	if strings.Contains(oa.logs.String(), "127.0.0.1/32") {
		t.Errorf("the client's address block reached the log")
	}
}
