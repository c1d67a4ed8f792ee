package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/admin/console"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

const token = "console-test-token-0123456789"

// fixture is a console on a real admin API on a memory store, served on
// loopback, with one claim in flight.
type fixture struct {
	srv   *httptest.Server
	store *memstore.Store
	key   keystore.Key
}

func newFixture(t *testing.T, o console.Options) *fixture {
	t.Helper()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	api, err := admin.New(admin.Options{Store: st, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	o.Token, o.Admin = token, api
	c, err := console.New(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/", api)
	mux.Handle("/ui/", c)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	k := keystore.NewKey("", "Bearer client", "", "key-1")
	if _, err := st.Reserve(context.Background(), k, keystore.ReserveOptions{Route: "create", Lease: time.Hour, Retention: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	return &fixture{srv: srv, store: st, key: k}
}

// client is a browser-like client: a cookie jar, no redirects followed
// automatically beyond what the test asks.
func (f *fixture) client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// post sends a form with the given Origin ("" none) and Host ("" the
// server's).
func (f *fixture) post(t *testing.T, c *http.Client, path string, form url.Values, origin, host string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func (f *fixture) get(t *testing.T, c *http.Client, path, host string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// login logs c in and returns the page's CSRF token.
func (f *fixture) login(t *testing.T, c *http.Client) string {
	t.Helper()
	origin := f.srv.URL
	if resp := f.post(t, c, "/ui/login", url.Values{"token": {token}}, origin, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: got %d; want 303", resp.StatusCode)
	}
	resp, body := f.get(t, c, "/ui/", "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ui/ after login: got %d; want 200", resp.StatusCode)
	}
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	return m[1]
}

func (f *fixture) inFlight(t *testing.T) bool {
	t.Helper()
	rec, err := f.store.Get(context.Background(), f.key)
	if err != nil {
		return false
	}
	return rec.State == keystore.StateInFlight
}

// TestRefused: a repair is refused, and the claim stays in flight, without
// a CSRF token, with a wrong one, from another origin, with Origin: null,
// with neither Origin nor Referer, with a foreign Host, without a session,
// and with an ended session.
func TestRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	c := f.client(t)
	csrf := f.login(t, c)
	path := "/ui/claims/" + f.key.String() + "/release"
	good := url.Values{"csrf": {csrf}, "reason": {"test"}, "confirm": {"yes"}}
	u, _ := url.Parse(f.srv.URL)
	cases := []struct {
		name   string
		client *http.Client
		form   url.Values
		origin string
		host   string
		want   int
	}{
		{"csrf missing", c, url.Values{"reason": {"test"}, "confirm": {"yes"}}, f.srv.URL, "", http.StatusForbidden},
		{"csrf wrong", c, url.Values{"csrf": {csrf + "x"}, "reason": {"test"}, "confirm": {"yes"}}, f.srv.URL, "", http.StatusForbidden},
		{"origin other port", c, good, "http://127.0.0.1:1", "", http.StatusForbidden},
		{"origin other host", c, good, "http://evil.example", "", http.StatusForbidden},
		{"origin null", c, good, "null", "", http.StatusForbidden},
		{"origin and referer missing", c, good, "", "", http.StatusForbidden},
		{"host rebinding", c, good, "http://evil.example:" + u.Port(), "evil.example:" + u.Port(), http.StatusForbidden},
		{"session missing", f.client(t), good, f.srv.URL, "", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := f.post(t, tc.client, path, tc.form, tc.origin, tc.host)
			if resp.StatusCode != tc.want {
				t.Errorf("got %d; want %d", resp.StatusCode, tc.want)
			}
			if !f.inFlight(t) {
				t.Fatal("the claim was released")
			}
		})
	}
	// Logged out: the old session's cookie and CSRF token no longer work.
	if resp := f.post(t, c, "/ui/logout", url.Values{"csrf": {csrf}}, f.srv.URL, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: got %d; want 303", resp.StatusCode)
	}
	if resp := f.post(t, c, path, good, f.srv.URL, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after logout: got %d; want 401", resp.StatusCode)
	}
	if !f.inFlight(t) {
		t.Fatal("the claim was released")
	}
}

// TestRelease: with session, CSRF token and Origin (or, without Origin, a
// same-origin Referer) a release of a running claim first asks for
// confirmation, then releases it through the admin API.
func TestRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	c := f.client(t)
	csrf := f.login(t, c)
	path := "/ui/claims/" + f.key.String() + "/release"
	if resp := f.post(t, c, path, url.Values{"csrf": {csrf}, "reason": {"ran nowhere"}}, f.srv.URL, ""); resp.StatusCode != http.StatusConflict {
		t.Fatalf("release without confirmation: got %d; want 409", resp.StatusCode)
	}
	if !f.inFlight(t) {
		t.Fatal("released without confirmation")
	}
	if resp := f.post(t, c, path, url.Values{"csrf": {csrf}, "confirm": {"yes"}}, f.srv.URL, ""); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("release without a reason: got %d; want 400 (the admin API's reason_required)", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(url.Values{"csrf": {csrf}, "reason": {"ran nowhere"}, "confirm": {"yes"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Referer", f.srv.URL+"/ui/claims/"+f.key.String())
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("release with Referer: got %d; want 303", resp.StatusCode)
	}
	if _, err := f.store.Get(context.Background(), f.key); err == nil {
		t.Fatal("the record is still there after the release")
	}
}

// TestHeaders: every answer carries the security headers; the cookie is
// HttpOnly, SameSite=Strict, Path=/ui/ and never holds the token; the
// cookie does not authenticate /admin/.
func TestHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{Hosts: []string{"admin.example.com"}})
	c := f.client(t)
	resp := f.post(t, c, "/ui/login", url.Values{"token": {token}}, f.srv.URL, "")
	ck := resp.Header.Get("Set-Cookie")
	for _, want := range []string{"HttpOnly", "SameSite=Strict", "Path=/ui/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("Set-Cookie %q lacks %s", ck, want)
		}
	}
	if strings.Contains(ck, token) {
		t.Errorf("Set-Cookie holds the token")
	}
	// The jar keys cookies by Host: a client that sends the session
	// cookie whatever the Host, as a rebinding page's browser would.
	u, _ := url.Parse(f.srv.URL + "/ui/")
	cookies := c.Jar.Cookies(u)
	anyHost := &http.Client{Transport: withCookies{cookies}, CheckRedirect: c.CheckRedirect}
	for _, host := range []string{"", "localhost:1", "[::1]:9", "admin.example.com:9090", "ADMIN.example.com"} {
		resp, _ := f.get(t, anyHost, "/ui/", host)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %q: got %d; want 200", host, resp.StatusCode)
		}
		for name, want := range map[string]string{
			"Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
			"X-Content-Type-Options":  "nosniff",
			"Cache-Control":           "no-store",
			"Referrer-Policy":         "same-origin",
		} {
			if got := resp.Header.Get(name); got != want {
				t.Errorf("%s: got %q; want %q", name, got, want)
			}
		}
	}
	for _, host := range []string{"evil.example", "127.0.0.2:80", "localhost.evil.example"} {
		if resp, _ := f.get(t, anyHost, "/ui/", host); resp.StatusCode != http.StatusForbidden {
			t.Errorf("Host %q: got %d; want 403", host, resp.StatusCode)
		}
	}
	// The session cookie never authenticates the admin API.
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/admin/claims", nil)
	resp2, err := anyHost.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /admin/claims with the console cookie: got %d; want 401", resp2.StatusCode)
	}
}

// TestLoginLimited: wrong tokens are refused, and after the burst even the
// right one waits (429), until the clock moves on.
func TestLoginLimited(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	f := newFixture(t, console.Options{Now: clock, LoginBurst: 3, LoginEvery: time.Second})
	c := f.client(t)
	for i := range 3 {
		if resp := f.post(t, c, "/ui/login", url.Values{"token": {"wrong"}}, f.srv.URL, ""); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: got %d; want 401", i, resp.StatusCode)
		}
	}
	if resp := f.post(t, c, "/ui/login", url.Values{"token": {token}}, f.srv.URL, ""); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("attempt over the burst: got %d; want 429", resp.StatusCode)
	}
	now = now.Add(time.Second)
	if resp := f.post(t, c, "/ui/login", url.Values{"token": {token}}, f.srv.URL, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("a second later: got %d; want 303", resp.StatusCode)
	}
}

// TestSessionExpires: a session unused for IdleTimeout ends.
func TestSessionExpires(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	f := newFixture(t, console.Options{Now: func() time.Time { return now }, IdleTimeout: time.Minute})
	c := f.client(t)
	f.login(t, c)
	now = now.Add(time.Minute)
	if resp, _ := f.get(t, c, "/ui/", ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after the idle timeout: got %d; want 303 to the login", resp.StatusCode)
	}
}

// TestDisabled: without a token the console answers 404.
func TestDisabled(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	defer st.Close()
	api, _ := admin.New(admin.Options{Store: st})
	c, err := console.New(console.Options{Admin: api})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(c)
	defer srv.Close()
	for _, p := range []string{"/ui/", "/ui/login"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: got %d; want 404", p, resp.StatusCode)
		}
	}
}

// withCookies adds cookies to every request.
type withCookies struct{ cookies []*http.Cookie }

func (w withCookies) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for _, k := range w.cookies {
		r.AddCookie(k)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestUnknownSection: the overview lists unknown records from the admin
// API's GET /admin/unknown (its shape on the unknown-outcomes branch: the
// claim view with claim_id, cause and original), and says "None: this
// store keeps no unknown-outcome records" when the API has no such
// listing (404), as the admin API of this tree answers.
func TestUnknownSection(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	defer st.Close()
	api, err := admin.New(admin.Options{Store: st, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	const key = "aa11bb22cc33dd44ee55ff6600770088aa11bb22cc33dd44ee55ff6600770088"
	const unread = "bb11bb22cc33dd44ee55ff6600770088aa11bb22cc33dd44ee55ff6600770088" // its probe state could not be read
	withUnknown := http.NewServeMux()
	withUnknown.Handle("/admin/", api)
	withUnknown.HandleFunc("GET /admin/unknown", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"unknown":[{"key":"`+key+`","state":"unknown","route":"pay","claimed_at":"2026-12-01T10:00:00Z","age_seconds":90,"claim_id":"c1","sent":true,"cause":"broken","probe":{"probes":2,"last":"absent","last_at":"2026-12-01T10:01:00Z","absent_since":"2026-12-01T10:00:30Z"},"original":{"method":"POST","path":"/pay/<b>","idempotency_key":"k","request_id":"r1"}},`+
			`{"key":"`+unread+`","state":"unknown","route":"pay","claimed_at":"2026-12-01T10:00:00Z","age_seconds":90,"claim_id":"c2","sent":true,"cause":"timeout","probe_unread":true}],"limit":200,"truncated":false,"probes_unread":1}`)
	})
	// A store without unknown records (an older backend) answers 404
	// not_supported, as admin.Handler does for it.
	noListing := http.NewServeMux()
	noListing.Handle("/admin/", api)
	noListing.HandleFunc("GET /admin/unknown", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"status":404,"code":"not_supported"}`)
	})
	for _, tc := range []struct {
		name  string
		admin http.Handler
		want  []string
	}{
		{"listed", withUnknown, []string{"pay", "POST /pay/&lt;b&gt;", "broken", "<td>2 probes, last absent at 2026-12-01T10:01:00Z; absent since 2026-12-01T10:00:30Z</td>", "1m30s", `href="/ui/claims/` + key + `"`,
			"<td>probe state not read</td>"}},
		{"none held", api, []string{"<p>None.</p>"}},
		{"no listing", noListing, []string{"None: this store keeps no unknown-outcome records."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := console.New(console.Options{Token: token, Admin: tc.admin})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("/ui/", c)
			srv := httptest.NewServer(mux)
			defer srv.Close()
			f := &fixture{srv: srv, store: st}
			cl := f.client(t)
			f.login(t, cl)
			_, body := f.get(t, cl, "/ui/", "")
			i := strings.Index(body, `id="h-unknown"`)
			j := strings.Index(body, `id="h-routes"`)
			if i < 0 || j < i {
				t.Fatalf("no unknown section in the page")
			}
			section := body[i:j]
			for _, want := range tc.want {
				if !strings.Contains(section, want) {
					t.Errorf("the unknown section lacks %q:\n%s", want, section)
				}
			}
		})
	}
}

// TestBusiestAndHeldSections: the rate-limit section lists each limiter's
// busiest clients from GET /admin/limits/clients (and nothing when the API
// counts none); the sessions section lists the longest-held turns with
// their ages, stuck from StuckAfter on.
func TestBusiestAndHeldSections(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	sessions := func() console.Sessions {
		return console.Sessions{Enabled: true, Active: 2, StuckAfter: 30 * time.Second, Oldest: []console.HeldSession{
			{Key: strings.Repeat("ab", 32), Since: now.Add(-95 * time.Second), Waiting: 3},
			{Key: strings.Repeat("cd", 32), Since: now.Add(-4 * time.Second), Locking: true},
		}}
	}
	busy := func() []admin.LimiterClients {
		return []admin.LimiterClients{
			{Limiter: "edge", Clients: []admin.Client{{Client: "192.0.2.7/32", Requests: 640, MaxOvercount: 32, Refused: 12}}},
			{Limiter: "route", Route: "create_order", Clients: []admin.Client{}},
		}
	}
	for _, tc := range []struct {
		name     string
		clients  func() []admin.LimiterClients
		sessions func() console.Sessions
		want     map[string][]string // section id: texts it must hold
		absent   map[string][]string
	}{
		{
			name: "listed", clients: busy, sessions: sessions,
			want: map[string][]string{
				"h-limits":   {"Busiest clients: edge limiter", "<code class=\"wrap\">192.0.2.7/32</code></td><td>640</td><td>32</td><td>12</td>", "Busiest clients: route create_order", "No requests counted yet."},
				"h-sessions": {"Longest-held turns", "abababababababab…", "<td>1m35s</td>", "<td>3</td>", `<span class="bad">stuck</span>`, "<td>4s</td>", "waiting for the shared lock", "held 30s or more"},
			},
		},
		{
			name: "none", clients: nil, sessions: func() console.Sessions { return console.Sessions{Enabled: true} },
			want:   map[string][]string{"h-sessions": {"No turn is held."}},
			absent: map[string][]string{"h-limits": {"Busiest clients"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := memstore.New(memstore.Options{})
			defer st.Close()
			api, err := admin.New(admin.Options{Store: st, Token: token, Clients: tc.clients})
			if err != nil {
				t.Fatal(err)
			}
			c, err := console.New(console.Options{Token: token, Admin: api, Now: func() time.Time { return now },
				Sessions: tc.sessions, Limits: func() []console.Limit { return nil }})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(c)
			defer srv.Close()
			f := &fixture{srv: srv, store: st}
			cl := f.client(t)
			f.login(t, cl)
			_, body := f.get(t, cl, "/ui/", "")
			section := func(id string) string {
				i := strings.Index(body, `<section aria-labelledby="`+id+`">`)
				if i < 0 {
					t.Fatalf("no section %s", id)
				}
				j := strings.Index(body[i:], "</section>")
				return body[i : i+j]
			}
			for id, texts := range tc.want {
				for _, s := range texts {
					if !strings.Contains(section(id), s) {
						t.Errorf("section %s lacks %q:\n%s", id, s, section(id))
					}
				}
			}
			for id, texts := range tc.absent {
				for _, s := range texts {
					if strings.Contains(section(id), s) {
						t.Errorf("section %s has %q:\n%s", id, s, section(id))
					}
				}
			}
		})
	}
}

// TestUnknownClaimPage: the resolve page of a real unknown record (memory
// store) shows its cause, its probe state's place ("no probe" until the
// admin API reports one), the sent mark and the claim id; completing it
// through the form resolves it, fenced by that claim id.
func TestUnknownClaimPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	ctx := context.Background()
	k := keystore.NewKey("unknown-1")
	res, err := f.store.Reserve(ctx, k, keystore.ReserveOptions{Fingerprint: keystore.Fingerprint{1}, Route: "pay", Lease: time.Minute, Retention: time.Hour, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.MarkSent(ctx, k, res.Token, keystore.UnknownInfo("POST", "/pay", "client-key", "req-1")); err != nil {
		t.Fatal(err)
	}
	if err := f.store.MarkUnknown(ctx, k, res.Token, keystore.CauseBroken); err != nil {
		t.Fatal(err)
	}
	c := f.client(t)
	csrf := f.login(t, c)
	_, body := f.get(t, c, "/ui/claims/"+k.String(), "")
	for _, want := range []string{"<dt>Cause</dt><dd>broken</dd>", "<dt>Probe state</dt><dd>no probe</dd>", "<dt>Sent upstream</dt>", res.Claim.ID.String(), "<code>POST /pay</code>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the resolve page lacks %q", want)
		}
	}
	_, overview := f.get(t, c, "/ui/", "")
	if !strings.Contains(overview, "<td>no probe</td>") || !strings.Contains(overview, "<td>broken</td>") {
		t.Errorf("the unknown table lacks the record's cause and probe state")
	}
	form := url.Values{"csrf": {csrf}, "status": {"201"}, "body": {`{"id":"op"}`}, "content_type": {"application/json"}, "reason": {"PSP shows it"}, "claim_id": {res.Claim.ID.String()}}
	if resp := f.post(t, c, "/ui/claims/"+k.String()+"/complete", form, f.srv.URL, ""); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("complete = %d; want 303", resp.StatusCode)
	}
	rec, err := f.store.Get(ctx, k)
	if err != nil || rec.State != keystore.StateCompleted || rec.Response == nil || string(rec.Response.Body) != `{"id":"op"}` {
		t.Fatalf("after complete: %v, %v; want completed with the operator's answer", rec.State, err)
	}
}
