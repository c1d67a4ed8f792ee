package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/testutil"
)

const adminToken = "browser-test-admin-token-0123456789"

// repoRoot is the repository's root, three levels up.
var repoRoot, _ = filepath.Abs("../../..")

// chromium returns the Chromium scripts/chromium.sh finds or installs. It
// skips the test when there is none, unless IDEMGATE_REQUIRE_BROWSER is set
// (make test sets it): then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot, "scripts", "chromium.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := fmt.Sprintf("no Chromium: scripts/chromium.sh: %v\n%s", err, lastLines(stderr.String(), 10))
		if os.Getenv("IDEMGATE_REQUIRE_BROWSER") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg + " (set IDEMGATE_REQUIRE_BROWSER=1 to fail instead)")
	}
	return strings.TrimSpace(string(out))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// artifacts is where screenshots go: $IDEMGATE_ARTIFACTS, else
// .tmp/artifacts/console in the repository (gitignored).
func artifacts(t *testing.T) string {
	dir := os.Getenv("IDEMGATE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoRoot, ".tmp", "artifacts")
	}
	dir = filepath.Join(dir, "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// upstream answers POST /orders: the first blocked calls wait until
// release is closed (a write in flight); later ones answer 201 at once.
// POST /payments breaks the connection after reading the request (the
// outcome is unknown), and GET answers 200.
type upstream struct {
	calls    atomic.Int32 // POST /orders
	payments atomic.Int32 // POST /payments
	blocked  int32
	release  chan struct{}
	once     sync.Once
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	switch {
	case r.URL.Path == "/payments":
		u.payments.Add(1)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // it ran, then the connection broke
		}
		return
	case r.Method == http.MethodGet:
		return
	}
	n := u.calls.Add(1)
	if n <= u.blocked {
		select {
		case <-u.release:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":"upstream-%d"}`, n)
}

func (u *upstream) unblock() { u.once.Do(func() { close(u.release) }) }

// idemgate is a running app on loopback.
type idemgate struct {
	public, admin string // base URLs
}

func startIdemgate(t *testing.T, upstreamURL string) *idemgate {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
listen: "127.0.0.1:18080"
admin_listen: "127.0.0.1:19090"
upstream:
  url: %q
  timeout: 60s
store:
  backend: memory
sessions:
  queue_timeout: 1s
routes:
  - name: create_order
    method: POST
    path: /orders
    idempotent: true
    session: {header: X-Cart}
  - name: create_payment
    method: POST
    path: /payments
    idempotent: true
    unknown_outcome: hold
  - name: get_cart
    method: GET
    path: /carts/{id}
    rate_limit: {requests: 1, per: 60s}
`, upstreamURL)))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.Options{AdminToken: adminToken, Version: "browsertest", Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := app.Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, 2*time.Second, lns) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("idemgate did not stop within 30s")
		}
	})
	g := &idemgate{public: "http://" + lns.Public.Addr().String(), admin: "http://" + lns.Admin.Addr().String()}
	testutil.Eventually(t, 20*time.Second, "ready", func() bool {
		resp, err := http.Get(g.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return g
}

// order sends a keyed POST /orders in the session cart-<key> and returns
// status, replay header and body.
func (g *idemgate) order(ctx context.Context, key string) (int, string, string, error) {
	return g.post(ctx, "/orders", key)
}

// post sends a keyed POST to path.
func (g *idemgate) post(ctx context.Context, path, key string) (int, string, string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.public+path, strings.NewReader(`{"amount":5}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer alice")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("X-Cart", "cart-"+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b), nil
}

// record is a record as the admin API lists it.
type record struct {
	Key        string  `json:"key"`
	AgeSeconds float64 `json:"age_seconds"`
	Cause      string  `json:"cause"`
}

// list returns the records of an admin listing (path /admin/claims or
// /admin/unknown, under field).
func (g *idemgate) list(t *testing.T, path, field string) []record {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string][]record
	json.NewDecoder(resp.Body).Decode(&out)
	return out[field]
}

// claims returns the keys of the claims in flight (the admin API).
func (g *idemgate) claims(t *testing.T) []string {
	t.Helper()
	var keys []string
	for _, c := range g.list(t, "/admin/claims", "claims") {
		keys = append(keys, c.Key)
	}
	return keys
}

// a11yJS checks the page: every form field has a label, links and buttons
// a name, one h1 and no skipped heading level, lang and title set, and
// every visible text's contrast against its effective background (from the
// computed styles) at least 4.5:1 (WCAG 2.1 AA). It returns the problems
// and how many texts it checked.
const a11yJS = `(() => {
  const problems = [];
  for (const el of document.querySelectorAll('input, textarea, select')) {
    if (el.type === 'hidden') continue;
    const labelled = (el.labels && [...el.labels].some(l => l.textContent.trim() !== '')) ||
      el.getAttribute('aria-label') || el.getAttribute('aria-labelledby');
    if (!labelled) problems.push('field without a label: ' + (el.id || el.name));
  }
  for (const el of document.querySelectorAll('a, button')) {
    if (el.textContent.trim() === '' && !el.getAttribute('aria-label')) problems.push('no accessible name: ' + el.outerHTML.slice(0, 80));
  }
  const levels = [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => +h.tagName[1]);
  if (levels.filter(l => l === 1).length !== 1) problems.push('want one h1; headings ' + levels.join(','));
  let prev = 0;
  for (const l of levels) { if (l > prev + 1) problems.push('heading level skips from ' + prev + ' to ' + l); prev = l; }
  if (!document.documentElement.lang) problems.push('no lang on html');
  if (!document.title) problems.push('no title');
  const parse = c => {
    const m = c.match(/rgba?\(([^)]+)\)/);
    if (!m) return null;
    const p = m[1].split(/[\s,\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const blend = (top, under) => ({r: top.r * top.a + under.r * (1 - top.a), g: top.g * top.a + under.g * (1 - top.a), b: top.b * top.a + under.b * (1 - top.a), a: 1});
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c.a > 0) { layers.push(c); if (c.a >= 1) break; }
    }
    let bg = {r: 255, g: 255, b: 255, a: 1};
    for (const c of layers.reverse()) bg = blend(c, bg);
    return bg;
  };
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
  };
  let checked = 0;
  const seen = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (!node.textContent.trim()) continue;
    const el = node.parentElement;
    if (seen.has(el)) continue;
    seen.add(el);
    const cs = getComputedStyle(el);
    if (cs.visibility === 'hidden' || cs.display === 'none' || el.getClientRects().length === 0 || el.closest('.sr')) continue;
    const bg = background(el);
    const fg = blend(parse(cs.color), bg);
    const a = lum(fg), b = lum(bg);
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    checked++;
    if (ratio < 4.5) problems.push('contrast ' + ratio.toFixed(2) + ':1 for "' + node.textContent.trim().slice(0, 40) + '" (' + cs.color + ')');
  }
  return {problems, checked};
})()`

type a11yResult struct {
	Problems []string `json:"problems"`
	Checked  int      `json:"checked"`
}

// checkA11y runs a11yJS on the current page.
func checkA11y(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	res, err := chromedp.Run(ctx, chromedp.Evaluate[a11yResult](a11yJS))
	if err != nil {
		t.Fatalf("%s: accessibility check: %v", page, err)
	}
	if res.Checked == 0 {
		t.Errorf("%s: accessibility check saw no text", page)
	}
	for _, p := range res.Problems {
		t.Errorf("%s: accessibility: %s", page, p)
	}
	t.Logf("%s: contrast checked for %d texts", page, res.Checked)
}

// screenshot saves a full-page PNG at width px, and checks that the page
// does not scroll sideways at that width.
func screenshot(t *testing.T, ctx context.Context, dir, name string, width int64) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(width, 900)); err != nil {
		t.Fatalf("viewport %d: %v", width, err)
	}
	overflow, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if overflow {
		t.Errorf("%s: the page scrolls sideways at %d px", name, width)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%dpx.png", name, width))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// TestConsoleInBrowser: an operator logs in to the console in headless
// Chromium with JavaScript disabled and sees two writes in flight with their
// ages and their session turns held past queue_timeout (stuck), an unknown
// outcome (the upstream broke the connection on a hold route) with its
// cause and probe state, and the limited client among the busiest. The
// unknown record is completed through its form with an answer and a
// reason: its retry replays that answer and nothing runs again. Of the two
// writes, one is completed — its retry replays — and the other released
// after confirming — its retry runs again. Every page passes the
// accessibility check, and the overview is screenshot at 1280 and 390 px.
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	up := &upstream{blocked: 2, release: make(chan struct{})}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	g := startIdemgate(t, upSrv.URL)
	t.Cleanup(up.unblock) // runs first: the blocked writes end before idemgate stops

	// Two writes in flight: their upstream calls block.
	clientCtx, cancelClients := context.WithCancel(context.Background())
	t.Cleanup(cancelClients)
	originals := make(chan error, 2)
	for _, key := range []string{"order-1", "order-2"} {
		go func() {
			_, _, _, err := g.order(clientCtx, key)
			originals <- err
		}()
	}
	testutil.Eventually(t, 20*time.Second, "two claims in flight", func() bool { return len(g.claims(t)) == 2 })

	// An unknown outcome: on the hold route, the upstream broke the
	// connection after reading the request.
	if status, _, body, err := g.post(context.Background(), "/payments", "pay-1"); err != nil || status != http.StatusBadGateway {
		t.Fatalf("POST /payments = %d %s, %v; want 502 (the connection broke)", status, body, err)
	}
	testutil.Eventually(t, 20*time.Second, "one unknown record", func() bool { return len(g.list(t, "/admin/unknown", "unknown")) == 1 })
	if status, _, body, _ := g.post(context.Background(), "/payments", "pay-1"); status != http.StatusConflict || !strings.Contains(body, "idempotency_outcome_unknown") {
		t.Fatalf("retry before the operator = %d %s; want 409 idempotency_outcome_unknown", status, body)
	}

	// A limited client: the cart route admits 1 a minute, so 2 of 3 are
	// refused.
	for i := range 3 {
		resp, err := http.Get(g.public + "/carts/c1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 429}[i == 0]; resp.StatusCode != want {
			t.Fatalf("GET /carts/c1 #%d = %d; want %d", i, resp.StatusCode, want)
		}
	}

	// The claims (and their session turns) are at least a second old, past
	// sessions.queue_timeout (1s): the turns are shown stuck.
	testutil.Eventually(t, 20*time.Second, "claims a second old", func() bool {
		cs := g.list(t, "/admin/claims", "claims")
		return len(cs) == 2 && cs[0].AgeSeconds >= 1.1 && cs[1].AgeSeconds >= 1.1
	})

	dir := artifacts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // root in a container
		chromedp.WindowSize(1280, 900),
	)...)
	defer cancelAlloc()
	ctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ui := g.admin + "/ui/"

	// No JavaScript: the console must work without it.
	if _, err := chromedp.Call(ctx, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatalf("disable JavaScript: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ui),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
	); err != nil {
		t.Fatalf("open the login page: %v", err)
	}
	checkA11y(t, ctx, "login")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#token`), adminToken),
		chromedp.Submit(chromedp.CSS(`#token`)),
		chromedp.WaitVisible(chromedp.CSS(`#h-claims`)),
	); err != nil {
		t.Fatalf("log in: %v", err)
	}
	if got := text(t, ctx, `h1`); got != "Overview" {
		t.Fatalf("after login h1 = %q; want Overview", got)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('section[aria-labelledby=h-claims] tbody tr').length`))
	if err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Fatalf("claims in flight on the page: %d; want 2", rows)
	}
	routes := text(t, ctx, `section[aria-labelledby=h-routes] tbody`)
	if !strings.Contains(routes, "create_order") {
		t.Errorf("routes section lacks create_order: %q", routes)
	}
	// Each claim in flight with its age: at least the second waited.
	ages, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('section[aria-labelledby=h-claims] tbody tr td:nth-child(3)')].map(td => td.textContent.trim())`))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ages {
		if d, err := time.ParseDuration(a); err != nil || d < time.Second || d > 3*time.Minute {
			t.Errorf("a claim's age on the page is %q; want a duration of at least 1s", a)
		}
	}
	if len(ages) != 2 {
		t.Errorf("claim ages on the page: %q; want 2", ages)
	}
	unknown := text(t, ctx, `section[aria-labelledby=h-unknown] tbody`)
	for _, want := range []string{"create_payment", "POST /payments", "broken", "no probe"} {
		if !strings.Contains(unknown, want) {
			t.Errorf("unknown section lacks %q: %q", want, unknown)
		}
	}
	held, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('table.held tbody tr td:nth-child(4)')].map(td => td.textContent.trim())`))
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 2 || held[0] != "stuck" || held[1] != "stuck" {
		t.Errorf("held session turns' states: %q; want two stuck (held past queue_timeout 1s)", held)
	}
	// The route limiter's table: the edge limiter's may list the client
	// too, or not (a passed request is counted 1 time in 32, as 32).
	busiest, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('h3[id^=h-busy-]')].filter(h => h.textContent.includes('route get_cart')).flatMap(h => [...h.nextElementSibling.querySelectorAll('table.busiest tbody tr')].map(tr => [...tr.cells].map(td => td.textContent.trim()).join(' ')))`))
	if err != nil {
		t.Fatal(err)
	}
	if len(busiest) != 1 || !strings.HasPrefix(busiest[0], "127.0.0.1/32 ") || !strings.HasSuffix(busiest[0], " 0 2") {
		t.Errorf("busiest clients of route get_cart: %q; want 127.0.0.1/32 with 2 refused", busiest)
	}
	checkA11y(t, ctx, "overview")
	screenshot(t, ctx, dir, "overview", 1280)
	screenshot(t, ctx, dir, "overview", 390)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatal(err)
	}

	keys := g.claims(t) // oldest first: order-1, order-2 (claimed in either order)
	resolve := func(key string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.Navigate(ui),
			chromedp.WaitVisible(chromedp.CSS(`#h-claims`)),
			chromedp.Click(chromedp.CSS(`a[href="/ui/claims/`+key+`"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#c-reason`)),
		); err != nil {
			t.Fatalf("open claim %s: %v", key, err)
		}
	}

	// Resolve the unknown record: the PSP shows the payment went through,
	// so it is completed with the operator's answer.
	unknownKey := g.list(t, "/admin/unknown", "unknown")[0].Key
	resolve(unknownKey)
	if page := text(t, ctx, `dl.card`); !strings.Contains(page, "broken") || !strings.Contains(page, "no probe") {
		t.Errorf("the unknown record's page lacks its cause or probe state: %q", page)
	}
	checkA11y(t, ctx, "unknown")
	screenshot(t, ctx, dir, "unknown", 390)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.SetValue(chromedp.CSS(`#c-status`), "201"),
		chromedp.SetValue(chromedp.CSS(`#c-body`), `{"id":"operator-pay"}`),
		chromedp.SendKeys(chromedp.CSS(`#c-reason`), "PSP shows payment pay-1 captured"),
		chromedp.Submit(chromedp.CSS(`#c-reason`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash[role=status]`)),
	); err != nil {
		t.Fatalf("complete the unknown record: %v", err)
	}
	if got := text(t, ctx, `p.flash[role=status]`); !strings.Contains(got, "completed") {
		t.Fatalf("after completing the unknown record the page says %q; want it completed", got)
	}
	if n := len(g.list(t, "/admin/unknown", "unknown")); n != 0 {
		t.Errorf("after the operator's answer %d unknown records remain; want 0", n)
	}
	// Its retry replays the operator's answer; nothing ran again.
	status, replayed, body, err := g.post(context.Background(), "/payments", "pay-1")
	if err != nil || status != http.StatusCreated || replayed != "true" || body != `{"id":"operator-pay"}` {
		t.Errorf("retry of the resolved payment = %d %q %s, %v; want 201, replayed, the operator's answer", status, replayed, body, err)
	}
	if n := up.payments.Load(); n != 1 {
		t.Errorf("the payment ran %d times upstream; want 1", n)
	}

	// Complete the first with an operator's answer.
	resolve(keys[0])
	checkA11y(t, ctx, "claim")
	screenshot(t, ctx, dir, "claim", 390)
	if err := chromedp.Do(ctx,
		chromedp.EmulateViewport(1280, 900),
		chromedp.SetValue(chromedp.CSS(`#c-status`), "201"),
		chromedp.SetValue(chromedp.CSS(`#c-body`), `{"id":"operator-1"}`),
		chromedp.SendKeys(chromedp.CSS(`#c-reason`), "PSP dashboard shows the charge"),
		chromedp.Submit(chromedp.CSS(`#c-reason`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash[role=status]`)),
	); err != nil {
		t.Fatalf("complete: %v", err)
	}
	if got := text(t, ctx, `p.flash[role=status]`); !strings.Contains(got, "completed") {
		t.Fatalf("after complete the page says %q; want it completed", got)
	}

	// Release the second: refused until confirmed (it may still run).
	resolve(keys[1])
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#r-reason`), "upstream log shows it never arrived"),
		chromedp.Submit(chromedp.CSS(`#r-reason`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-why`)),
	); err != nil {
		t.Fatalf("release unconfirmed: %v", err)
	}
	if n := len(g.claims(t)); n != 1 {
		t.Fatalf("after an unconfirmed release %d claims are in flight; want 1", n)
	}
	checkA11y(t, ctx, "confirm")
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#r-confirm`)),
		chromedp.Submit(chromedp.CSS(`#r-reason`)),
		chromedp.WaitVisible(chromedp.CSS(`p.flash[role=status]`)),
	); err != nil {
		t.Fatalf("release confirmed: %v", err)
	}
	if got := text(t, ctx, `p.flash[role=status]`); !strings.Contains(got, "released") {
		t.Fatalf("after release the page says %q; want it released", got)
	}
	if n := len(g.claims(t)); n != 0 {
		t.Fatalf("after both repairs %d claims are in flight; want 0", n)
	}
	screenshot(t, ctx, dir, "after", 1280)

	// The two original requests still hold their session turns (a call
	// keeps its turn until it ends): let them end before the retries.
	up.unblock()
	for range 2 {
		if err := <-originals; err != nil {
			t.Fatalf("an original request failed: %v", err)
		}
	}

	// The retries: the completed key replays the operator's answer, the
	// released one runs again upstream.
	got := map[string][3]string{}
	for _, key := range []string{"order-1", "order-2"} {
		status, replayed, body, err := g.order(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		got[key] = [3]string{fmt.Sprint(status), replayed, body}
	}
	operator, rerun := got["order-1"], got["order-2"]
	if operator[2] != `{"id":"operator-1"}` { // keys[0] may be order-2
		operator, rerun = rerun, operator
	}
	if operator != [3]string{"201", "true", `{"id":"operator-1"}`} {
		t.Errorf("retry of the completed write: status, replayed, body = %q; want 201, true, the operator's answer", operator)
	}
	if rerun != [3]string{"201", "", `{"id":"upstream-3"}`} {
		t.Errorf("retry of the released write: status, replayed, body = %q; want 201, not replayed, a new upstream answer", rerun)
	}

	// Logout ends the session: the overview asks for the token again.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(ui),
		chromedp.WaitVisible(chromedp.CSS(`form.logout button`)),
		chromedp.Click(chromedp.CSS(`form.logout button`)),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.Navigate(ui),
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
	); err != nil {
		t.Fatalf("logout: %v", err)
	}
}
