package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed console.css
var css []byte

// Options configure a [Handler]. Only Token and Admin are required; each
// source left nil shows its section as not available.
type Options struct {
	// Token is the admin token an operator logs in with. "" disables the
	// console: every request gets 404.
	Token string
	// Admin is the admin API (package admin's Handler). The console lists
	// claims and performs every repair through it, with the Bearer token,
	// so that its rules and its log line are the API's. Required.
	Admin http.Handler
	// Hosts are the host names, besides loopback, that a request's Host may
	// carry (config admin_host), without port. Compared case-insensitively.
	Hosts []string
	// Routes returns the running routes with their counters.
	Routes func() []Route
	// Health returns the store's health.
	Health func(ctx context.Context) Health
	// Config returns the loaded config's revision and the last reload.
	Config func() ConfigStatus
	// Sessions returns the session queue's state.
	Sessions func() Sessions
	// Limits returns the limiters' counters.
	Limits func() []Limit
	// Logger receives logins, logouts and refusals. Default: discard.
	Logger *slog.Logger
	// Now is the clock of sessions and ages. Default time.Now.
	Now func() time.Time
	// IdleTimeout ends a session unused this long. Default 30m.
	IdleTimeout time.Duration
	// MaxAge ends a session this long after login. Default 8h.
	MaxAge time.Duration
	// LoginEvery and LoginBurst limit login attempts for the whole process
	// (every client behind a port-forward shares one address): a burst of
	// LoginBurst, then one per LoginEvery. Default one per second, burst 5.
	LoginEvery time.Duration
	LoginBurst int
}

// Route is one running route and its counters.
type Route struct {
	Name, Method, Path string
	Idempotent         bool
	// Requests counts the route's requests by outcome (DESIGN.md's names).
	Requests map[string]float64
	// Total is the sum of Requests.
	Total float64
}

// Health is the store's health.
type Health struct {
	Backend string
	OK      bool
	Error   string
	// Resets counts store resets seen (lost data); LastReset and Checked
	// (the epoch marker's last read) are zero when never.
	Resets             uint64
	LastReset, Checked time.Time
	EpochError         string
}

// ConfigStatus is the loaded config's revision and the last reload.
type ConfigStatus struct {
	// Revision counts the configs applied: 1 at start, +1 per reload that
	// changed something. Digest is the applied file's SHA-256 prefix when
	// known.
	Revision        int
	Digest          string
	Applied         time.Time
	LastReload      time.Time // zero: none tried
	LastResult      string    // "applied", "unchanged", "refused"
	LastProblems    []string
	RestartRequired []string
}

// Sessions is the session queue's state in this process.
type Sessions struct {
	Enabled bool
	// Active counts sessions with a request held or waiting; Waiting counts
	// the waiting requests; Rejected those refused a turn since start.
	Active   int
	Waiting  float64
	Rejected float64
	// Oldest are the sessions whose turn has been held longest, longest
	// first (the source decides how many).
	Oldest []HeldSession
	// StuckAfter is how long a turn may be held before the page calls it
	// stuck (the wiring uses sessions.queue_timeout: beyond it, requests
	// waiting behind it time out). 0: none is.
	StuckAfter time.Duration
}

// HeldSession is one session whose turn is held.
type HeldSession struct {
	// Key is the session's key (a hash, never the session id as sent).
	Key string
	// Since is when the current holder got the turn.
	Since time.Time
	// Waiting counts the requests waiting behind it; Locking reports the
	// holder itself still waiting for the shared lock (Redis).
	Waiting int
	Locking bool
	// Age and Stuck are filled by the console: how long the turn has been
	// held, and whether that is StuckAfter or more.
	Age   time.Duration
	Stuck bool
}

// Limit is a limiter's counters for one route.
type Limit struct {
	Limiter, Route string
	Rejected       float64
}

// Handler serves /ui/. Build it with [New]; it is safe for concurrent use.
type Handler struct {
	o        Options
	token    [sha256.Size]byte
	hosts    atomic.Pointer[map[string]bool] // SetHosts replaces it
	sessions *sessions
	logins   *bucket
	tmpl     *template.Template
	mux      *http.ServeMux
}

// New checks o and builds the handler.
func New(o Options) (*Handler, error) {
	if o.Admin == nil {
		return nil, errors.New("console: Admin is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Minute
	}
	if o.MaxAge <= 0 {
		o.MaxAge = 8 * time.Hour
	}
	if o.LoginEvery <= 0 {
		o.LoginEvery = time.Second
	}
	if o.LoginBurst <= 0 {
		o.LoginBurst = 5
	}
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	h := &Handler{
		o:        o,
		token:    sha256.Sum256([]byte(o.Token)),
		sessions: newSessions(o.Now, o.IdleTimeout, o.MaxAge, maxSessions),
		logins:   &bucket{now: o.Now, every: o.LoginEvery, burst: o.LoginBurst},
		tmpl:     t,
	}
	h.SetHosts(o.Hosts)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/console.css", h.stylesheet)
	mux.HandleFunc("GET /ui/login", h.loginPage)
	mux.HandleFunc("POST /ui/login", h.login)
	mux.Handle("POST /ui/logout", h.authed(h.logout))
	mux.Handle("GET /ui/{$}", h.authed(h.dashboard))
	mux.Handle("GET /ui/claims/{key}", h.authed(h.claimPage))
	mux.Handle("POST /ui/claims/{key}/release", h.authed(h.release))
	mux.Handle("POST /ui/claims/{key}/complete", h.authed(h.complete))
	mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		h.refuse(w, r, http.StatusNotFound, "No such page.")
	})
	h.mux = mux
	return h, nil
}

// maxSessions bounds the sessions held at once; a login beyond it ends the
// least recently used one.
const maxSessions = 64

// Close ends every session.
func (h *Handler) Close() { h.sessions.clear() }

// ServeHTTP implements http.Handler: the Host check and the security
// headers first, then the pages.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hdr := w.Header()
	hdr.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Referrer-Policy", "same-origin") // see the package doc
	hdr.Set("Cache-Control", "no-store")
	if h.o.Token == "" {
		http.NotFound(w, r)
		return
	}
	if !h.hostAllowed(r.Host) {
		h.o.Logger.Warn("console request refused: Host is neither loopback nor admin_host", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
		h.refuse(w, r, http.StatusForbidden, "This host name is not allowed: open the console on localhost (kubectl port-forward) or on the configured admin_host.")
		return
	}
	if r.Method == http.MethodPost && !h.sameOrigin(r) {
		h.o.Logger.Warn("console request refused: cross-origin POST", "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr, "path", r.URL.Path)
		h.refuse(w, r, http.StatusForbidden, "This form was not sent from the console's own page.")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// hostAllowed reports whether host (a Host header, with or without port)
// names loopback or a configured admin host.
func (h *Handler) hostAllowed(host string) bool {
	if host == "" {
		return false
	}
	name := host
	if n, _, err := net.SplitHostPort(host); err == nil {
		name = n
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		name = host[1 : len(host)-1]
	}
	return (*h.hosts.Load())[strings.ToLower(strings.TrimSuffix(name, "."))]
}

// SetHosts replaces Options.Hosts (a reload of admin_host): the host names,
// besides loopback, that a request's Host may carry.
func (h *Handler) SetHosts(hosts []string) {
	m := map[string]bool{"localhost": true, "127.0.0.1": true, "::1": true}
	for _, host := range hosts {
		m[strings.ToLower(strings.TrimSuffix(host, "."))] = true
	}
	h.hosts.Store(&m)
}

// sameOrigin is the Origin rule of the package doc.
func (h *Handler) sameOrigin(r *http.Request) bool {
	origin := r.Header.Values("Origin")
	switch len(origin) {
	case 1:
		return originMatches(origin[0], r.Host, false)
	case 0:
		ref := r.Header.Values("Referer")
		return len(ref) == 1 && originMatches(ref[0], r.Host, true)
	}
	return false
}

// originMatches reports whether s (an Origin, or a Referer when isURL) is
// http or https with exactly host.
func originMatches(s, host string, isURL bool) bool {
	u, err := url.Parse(s)
	if err != nil || u.User != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if !isURL && (u.Path != "" || u.RawQuery != "" || u.Fragment != "") {
		return false
	}
	return strings.EqualFold(u.Host, host)
}

// tokenOK compares a login's token in constant time; both sides are hashed
// so neither bytes nor length leak.
func (h *Handler) tokenOK(tok string) bool {
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], h.token[:]) == 1
}

func (h *Handler) stylesheet(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/css; charset=utf-8")
	w.Write(css)
}

// bucket is the login attempts' token bucket: burst attempts, then one per
// every. It keeps the time it is next full at (GCRA), one value.
type bucket struct {
	now   func() time.Time
	every time.Duration
	burst int
	mu    sync.Mutex // protects tat
	tat   time.Time
}

// allow takes one attempt, or reports false when there is none left.
func (b *bucket) allow() bool {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	tat := b.tat
	if tat.Before(now) {
		tat = now
	}
	next := tat.Add(b.every)
	if next.Sub(now) > time.Duration(b.burst)*b.every {
		return false
	}
	b.tat = next
	return true
}
