package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/keystore"
	"golang.org/x/net/http/httpguts"
)

// Store is what the admin API needs of the idempotency store: reading one
// record and the operator repairs of [keystore.Admin].
type Store interface {
	keystore.Admin
	Get(ctx context.Context, key keystore.Key) (keystore.Record, error)
}

// Options configure a [Handler].
type Options struct {
	// Store holds the records. Required.
	Store Store
	// Token is the bearer token every request must carry. "" disables the
	// API: every request gets 404.
	Token string
	// ScopeKey computes a record's key for POST /admin/keys from a tenant,
	// the client's identity as the proxy resolves it — its headers
	// (cookies in a Cookie header) and, for a JWT identity, its verified
	// token's claims (nil: no token) — and the client's idempotency key
	// (the proxy's (*proxy.Proxy).LookupKey). An error (claims that do not
	// fit the identity's sources) is the operator's: 400. Nil: that
	// endpoint answers 404.
	ScopeKey func(tenant string, identity http.Header, claims map[string]json.RawMessage, key string) (keystore.Key, error)
	// TenantFor returns the tenant of a request's Host, and false when the
	// host has none (config.Idempotency.TenantFor, the proxy's rule), for
	// POST /admin/keys with "host" instead of "tenant". Nil: "host" is
	// refused.
	TenantFor func(host string) (tenant string, ok bool)
	// MaxResponseBytes caps the body of an operator's answer, as
	// idempotency.max_response_bytes caps stored answers. Default 64 KiB.
	MaxResponseBytes int64
	// DropHeaders are response headers never stored or replayed
	// (idempotency.drop_headers): an operator's answer loses them as an
	// upstream's does, and the answer to the operator names them.
	DropHeaders []string
	// RouteDropHeaders returns the drop_headers of the running route named
	// route, and false when it has none of its own (or is gone): then
	// DropHeaders apply. An operator's answer for a route's record loses
	// what that route's upstream answers lose. Nil: DropHeaders always.
	RouteDropHeaders func(route string) (names []string, ok bool)
	// Registerer, when set, gets idemgate_admin_requests_total and
	// idemgate_admin_damaged_records_total.
	Registerer prometheus.Registerer
	// Logger receives one line per request. Default: discard.
	Logger *slog.Logger
	// Now is the clock for ages. Default time.Now.
	Now func() time.Time
	// Timeout bounds each store call. Default 5s.
	Timeout time.Duration
	// Clients returns each limiter's busiest clients for GET
	// /admin/limits/clients. Nil: that endpoint answers 404.
	Clients func() []LimiterClients
	// RequestIDHeader returns the header a request ID is read from and
	// answered with (request_id_header; the proxy's
	// (*proxy.Proxy).RequestIDHeader, so a reload applies). Nil:
	// X-Request-Id.
	RequestIDHeader func() string
}

// Handler serves the admin API. It is an http.Handler for the /admin/
// prefix, safe for concurrent use. Build it with [New].
type Handler struct {
	o        Options
	token    [sha256.Size]byte
	mux      *http.ServeMux
	requests *prometheus.CounterVec // action, code
	damaged  prometheus.Counter     // records the listings skipped
	drop     map[string]bool        // canonical DropHeaders
}

// Limits of the list endpoint.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
	maxReasonBytes   = 1024
)

// New checks o and builds the handler.
func New(o Options) (*Handler, error) {
	if o.Store == nil {
		return nil, errors.New("admin: Store is required")
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 64 << 10
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	h := &Handler{o: o, token: sha256.Sum256([]byte(o.Token)), drop: canonicalSet(o.DropHeaders)}
	if o.Registerer != nil {
		cv, err := register(o.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_admin_requests_total",
			Help: "Requests to the admin API, by action (list, list_unknown, inspect, release, complete, key, limit_clients; auth for refused credentials, disabled without a token, other for unknown paths) and HTTP status code.",
		}, []string{"action", "code"}))
		if err != nil {
			return nil, err
		}
		cv.WithLabelValues("auth", "401") // exists at 0: rate() sees the first refusal
		h.requests = cv
		h.damaged, err = register(o.Registerer, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_admin_damaged_records_total",
			Help: "Records the admin API's listings skipped because they could not be read (a foreign or damaged value at a record's key, a sealed part that does not open); each listing logs them.",
		}))
		if err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/claims", h.list)
	mux.HandleFunc("GET /admin/unknown", h.listUnknown)
	mux.HandleFunc("GET /admin/claims/{key}", h.inspect)
	mux.HandleFunc("POST /admin/claims/{key}/release", h.release)
	mux.HandleFunc("POST /admin/claims/{key}/complete", h.complete)
	mux.HandleFunc("POST /admin/keys", h.computeKey)
	mux.HandleFunc("GET /admin/limits/clients", h.limitClients)
	mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, "other", http.StatusNotFound, "not_found", "no such admin endpoint")
	})
	h.mux = mux
	return h, nil
}

// register registers c on reg, or returns the collector of its kind
// already registered there: not promauto, so that a handler rebuilt on the
// same registry (a new token) keeps counting on the same series.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("admin: %w", err)
}

// requestIDHeader is the header of request IDs (Options.RequestIDHeader).
func (h *Handler) requestIDHeader() string {
	if h.o.RequestIDHeader != nil {
		if s := h.o.RequestIDHeader(); s != "" {
			return s
		}
	}
	return problem.RequestIDHeader
}

// Enabled reports whether a token is set.
func (h *Handler) Enabled() bool { return h.o.Token != "" }

// ServeHTTP implements http.Handler: it checks the token, then routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every answer and log line carries the request's ID, as the proxy's do.
	idh := h.requestIDHeader()
	id := problem.RequestID(r.Header.Get(idh))
	r.Header.Set(idh, id)
	w.Header().Set(idh, id)
	w.Header().Set("Cache-Control", "no-store")
	if !h.Enabled() {
		h.fail(w, r, "disabled", http.StatusNotFound, "admin_disabled", "the admin API is disabled: set IDEMGATE_ADMIN_TOKEN to enable it")
		return
	}
	if !h.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="idemgate-admin"`)
		h.fail(w, r, "auth", http.StatusUnauthorized, "unauthorized", "a valid Authorization: Bearer token is required")
		return
	}
	h.mux.ServeHTTP(w, r)
}

// authorized compares the bearer token in constant time: both sides are
// hashed first, so neither the token's bytes nor its length leak through
// timing.
func (h *Handler) authorized(r *http.Request) bool {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return false
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(got[:], h.token[:]) == 1
}

// Claim is a record as the API shows it (the console decodes the API's
// answers into it too).
type Claim struct {
	Key          string     `json:"key"`
	State        string     `json:"state"`
	Route        string     `json:"route"`
	Fingerprint  string     `json:"fingerprint"`
	Token        uint64     `json:"token"`
	ClaimedAt    time.Time  `json:"claimed_at"`
	AgeSeconds   float64    `json:"age_seconds"`
	LeaseEnd     *time.Time `json:"lease_end,omitempty"`
	LeaseExpired *bool      `json:"lease_expired,omitempty"`
	ExpiresAt    time.Time  `json:"expires_at"`
	Response     *Answer    `json:"response,omitempty"`
	// Unknown outcomes (DESIGN.md): the claim's id (resolutions are fenced
	// by it), the sent mark, an unknown record's cause and what the sent
	// mark kept of the original request.
	ClaimID  string    `json:"claim_id,omitempty"`
	Sent     bool      `json:"sent,omitempty"`
	Cause    string    `json:"cause,omitempty"`
	Original *Original `json:"original,omitempty"`
	// Probe is an unknown record's reconcile probe state; ResolvedBy is
	// "probe" on a record a probe resolved. ProbeUnread is set when the
	// state could not be read (a store error, or the request's deadline
	// came first): then Probe and ResolvedBy say nothing.
	Probe       *ProbeView `json:"probe,omitempty"`
	ResolvedBy  string     `json:"resolved_by,omitempty"`
	ProbeUnread bool       `json:"probe_unread,omitempty"`
}

// ProbeView is an unknown record's reconcile probe state.
type ProbeView struct {
	Probes      int        `json:"probes"`
	Last        string     `json:"last"`
	LastAt      time.Time  `json:"last_at"`
	AbsentSince *time.Time `json:"absent_since,omitempty"`
}

// hasProbe reports whether rec may have a reconcile probe state to show:
// an unknown record, or a completed one a probe may have resolved.
func (h *Handler) hasProbe(rec keystore.Record) bool {
	_, ok := h.o.Store.(keystore.UnknownStore)
	return ok && (rec.State == keystore.StateUnknown || rec.State == keystore.StateCompleted)
}

// addProbe adds rec's reconcile probe state to c: the state of an unknown
// record, or resolved_by: probe on a record a probe resolved. A state
// that cannot be read sets probe_unread, and addProbe reports false.
func (h *Handler) addProbe(ctx context.Context, c *Claim, rec keystore.Record) bool {
	if !h.hasProbe(rec) {
		return true
	}
	st, ok, err := h.o.Store.(keystore.UnknownStore).ProbeStatus(ctx, rec.Key)
	if err != nil {
		c.ProbeUnread = true
		return false
	}
	if !ok || st.ClaimID != rec.ClaimID {
		return true // never probed under this claim
	}
	if rec.State == keystore.StateCompleted {
		if st.Resolved {
			c.ResolvedBy = "probe"
		}
		return true
	}
	v := &ProbeView{Probes: st.Probes, Last: st.Last, LastAt: st.LastAt.UTC()}
	if !st.AbsentSince.IsZero() {
		t := st.AbsentSince.UTC()
		v.AbsentSince = &t
	}
	c.Probe = v
	return true
}

// probeReaders bounds the probe-state reads one listing runs at once: a
// listing of up to maxListLimit unknown records reads them in about
// maxListLimit/probeReaders store round trips, and never holds more than
// probeReaders of the store's connections.
const probeReaders = 8

// addProbes adds the probe state of each of recs to out[i] (out[i] is
// recs[i]'s view), at most probeReaders reads at once, all within ctx (the
// request's deadline): a row whose state could not be read in time says so
// (probe_unread), never silently lacks it. It returns how many could not
// be read.
func (h *Handler) addProbes(ctx context.Context, out []Claim, recs []keystore.Record) int {
	var next, unread atomic.Int64
	var wg sync.WaitGroup
	for range min(probeReaders, len(recs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(recs) {
					return
				}
				if !h.addProbe(ctx, &out[i], recs[i]) {
					unread.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(unread.Load())
}

// Original is what a sent mark keeps of the original request.
type Original struct {
	Method    string `json:"method"`
	Path      string `json:"path"`
	Key       string `json:"idempotency_key"`
	RequestID string `json:"request_id"`
}

// Answer is a stored answer. Headers and body appear only when asked for
// (inspect with body=true).
type Answer struct {
	Status     int         `json:"status"`
	TooLarge   bool        `json:"too_large,omitempty"`
	BodyBytes  int         `json:"body_bytes"`
	Headers    http.Header `json:"headers,omitempty"`
	Body       *string     `json:"body,omitempty"`        // when the body is UTF-8
	BodyBase64 *string     `json:"body_base64,omitempty"` // otherwise
}

func (h *Handler) view(rec keystore.Record, withBody bool) Claim {
	now := h.o.Now()
	c := Claim{
		Key:         rec.Key.String(),
		State:       rec.State.String(),
		Route:       rec.Route,
		Fingerprint: rec.Fingerprint.String(),
		Token:       rec.Token,
		ClaimedAt:   rec.Claimed.UTC(),
		AgeSeconds:  now.Sub(rec.Claimed).Seconds(),
		ExpiresAt:   rec.Expires.UTC(),
	}
	if !rec.ClaimID.IsZero() {
		c.ClaimID = rec.ClaimID.String()
	}
	c.Sent = rec.Sent
	if rec.State == keystore.StateUnknown {
		c.Cause = rec.Cause.String()
	}
	if in := rec.Info; in != nil {
		c.Original = &Original{Method: in.Header.Get(keystore.InfoMethod), Path: in.Header.Get(keystore.InfoPath),
			Key: in.Header.Get(keystore.InfoKey), RequestID: in.Header.Get(keystore.InfoRequestID)}
	}
	if rec.State == keystore.StateInFlight {
		end := rec.LeaseEnd.UTC()
		expired := !now.Before(rec.LeaseEnd)
		c.LeaseEnd, c.LeaseExpired = &end, &expired
	}
	if resp := rec.Response; resp != nil {
		a := &Answer{Status: resp.Status, TooLarge: resp.TooLarge, BodyBytes: len(resp.Body)}
		if withBody && !resp.TooLarge {
			a.Headers = resp.Header
			if utf8.Valid(resp.Body) {
				s := string(resp.Body)
				a.Body = &s
			} else {
				s := base64.StdEncoding.EncodeToString(resp.Body)
				a.BodyBase64 = &s
			}
		}
		c.Response = a
	}
	return c
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	older := time.Duration(0)
	if s := q.Get("older_than"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			h.fail(w, r, "list", http.StatusBadRequest, "invalid_request", "older_than must be a duration like \"5m\"")
			return
		}
		older = d
	}
	out, limit, skipped, _, ok := h.listing(w, r, "list", false, func(ctx context.Context, limit int) ([]keystore.Record, error) {
		return h.o.Store.InFlight(ctx, older, limit)
	})
	if !ok {
		return
	}
	h.log(r, "list", http.StatusOK, "", "", slog.String("older_than", older.String()), slog.Int("count", len(out)), slog.Int("damaged", skipped))
	h.ok(w, r, "list", map[string]any{"claims": out, "older_than": older.String(), "limit": limit, "truncated": len(out) == limit, "damaged": skipped})
}

// listing runs a listing (action) with the request's limit: list returns
// the records, with a [*keystore.DamagedError] for those it could not read.
// It returns them as claims (with their probe's state when probes), how
// many were skipped and how many probe states could not be read; a bad
// limit or a store failure is answered, and ok is false.
func (h *Handler) listing(w http.ResponseWriter, r *http.Request, action string, probes bool, list func(ctx context.Context, limit int) ([]keystore.Record, error)) (out []Claim, limit, skipped, unread int, ok bool) {
	if limit, ok = h.limit(w, r, action); !ok {
		return nil, 0, 0, 0, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	recs, err := list(ctx, limit)
	var damaged *keystore.DamagedError
	if err != nil && !errors.As(err, &damaged) {
		h.storeFailed(w, r, action, "", err)
		return nil, 0, 0, 0, false
	}
	out = make([]Claim, len(recs))
	for i, rec := range recs {
		out[i] = h.view(rec, false)
	}
	if probes {
		unread = h.addProbes(ctx, out, recs)
	}
	return out, limit, h.skipped(r, action, damaged), unread, true
}

// skipped counts and logs the records a listing skipped because it could
// not read them (nil: none), and returns how many there were. One damaged
// record never fails a listing.
func (h *Handler) skipped(r *http.Request, action string, damaged *keystore.DamagedError) int {
	if damaged == nil || damaged.Count == 0 {
		return 0
	}
	if h.damaged != nil {
		h.damaged.Add(float64(damaged.Count))
	}
	h.o.Logger.LogAttrs(r.Context(), slog.LevelWarn, "admin listing skipped damaged records",
		slog.String("action", action),
		slog.String("request_id", r.Header.Get(h.requestIDHeader())),
		slog.Int("damaged", damaged.Count),
		slog.Any("records", damaged.Names),
		slog.Any("error", damaged.Err))
	return damaged.Count
}

// limit reads a listing's limit parameter (default defaultListLimit); on
// a bad one it answers 400 and reports false.
func (h *Handler) limit(w http.ResponseWriter, r *http.Request, action string) (int, bool) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return defaultListLimit, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxListLimit {
		h.fail(w, r, action, http.StatusBadRequest, "invalid_request", fmt.Sprintf("limit must be a number from 1 to %d", maxListLimit))
		return 0, false
	}
	return n, true
}

// listUnknown lists unknown records (DESIGN.md, Unknown outcomes), oldest
// claim first: GET /admin/unknown?limit=N.
func (h *Handler) listUnknown(w http.ResponseWriter, r *http.Request) {
	us, ok := h.o.Store.(keystore.UnknownStore)
	if !ok {
		h.fail(w, r, "list_unknown", http.StatusNotFound, "not_supported", "the store keeps no unknown records")
		return
	}
	out, limit, skipped, unread, ok := h.listing(w, r, "list_unknown", true, us.Unknown)
	if !ok {
		return
	}
	h.log(r, "list_unknown", http.StatusOK, "", "", slog.Int("count", len(out)), slog.Int("damaged", skipped), slog.Int("probes_unread", unread))
	h.ok(w, r, "list_unknown", map[string]any{"unknown": out, "limit": limit, "truncated": len(out) == limit, "damaged": skipped, "probes_unread": unread})
}

// LimiterClients is one limiter's busiest clients.
type LimiterClients struct {
	// Limiter is "edge" or "route"; Route is the route's name ("" for the
	// edge limiter).
	Limiter string `json:"limiter"`
	Route   string `json:"route"`
	// Clients are the busiest first; never nil.
	Clients []Client `json:"clients"`
}

// Client is one client's counts in a limiter's busiest clients.
type Client struct {
	// Client is the address block counted ("192.0.2.1/32",
	// "2001:db8::/64") or a hashed identity ("hash:…").
	Client string `json:"client"`
	// Requests is an estimate of its requests (an upper bound of those
	// counted), at most MaxOvercount too high; Refused counts its refused
	// requests (a lower bound).
	Requests     uint64 `json:"requests"`
	MaxOvercount uint64 `json:"max_overcount"`
	Refused      uint64 `json:"refused"`
}

// limitClients lists each limiter's busiest clients: GET
// /admin/limits/clients. Client addresses are personal data: they are
// shown only here, behind the token, and never logged.
func (h *Handler) limitClients(w http.ResponseWriter, r *http.Request) {
	if h.o.Clients == nil {
		h.fail(w, r, "limit_clients", http.StatusNotFound, "not_supported", "this process counts no limiter clients")
		return
	}
	out := h.o.Clients()
	if out == nil {
		out = []LimiterClients{}
	}
	h.log(r, "limit_clients", http.StatusOK, "", "", slog.Int("limiters", len(out)))
	h.ok(w, r, "limit_clients", map[string]any{"limiters": out})
}

// resolveUnknown resolves k if it is an unknown record: completes it with
// resp, or releases it (nil), fenced by claim id (the request's claim_id
// when given, else the record's as just read), so that the first
// resolution wins. handled is false when k is not an unknown record (the
// caller repairs an in-flight one as before).
func (h *Handler) resolveUnknown(ctx context.Context, k keystore.Key, claimID string, resp *keystore.Response) (handled bool, err error) {
	us, ok := h.o.Store.(keystore.UnknownStore)
	if !ok {
		return false, nil
	}
	rec, err := h.o.Store.Get(ctx, k)
	if err != nil || rec.State != keystore.StateUnknown {
		if claimID != "" && err == nil && (rec.State != keystore.StateInFlight || rec.ClaimID.String() != claimID) {
			return true, keystore.ErrLeaseLost // resolved or claimed anew meanwhile
		}
		return false, nil // in flight under the claim the operator saw: repaired as before
	}
	id := rec.ClaimID
	if claimID != "" && claimID != id.String() {
		return true, keystore.ErrLeaseLost
	}
	return true, us.Resolve(ctx, k, id, resp)
}

// key parses the {key} path segment.
func (h *Handler) key(w http.ResponseWriter, r *http.Request, action string) (keystore.Key, bool) {
	k, err := keystore.ParseKey(strings.ToLower(r.PathValue("key")))
	if err != nil {
		h.fail(w, r, action, http.StatusBadRequest, "invalid_key", "the key must be the record's 64-digit hex store key (see POST /admin/keys)")
		return k, false
	}
	return k, true
}

func (h *Handler) inspect(w http.ResponseWriter, r *http.Request) {
	k, ok := h.key(w, r, "inspect")
	if !ok {
		return
	}
	withBody, _ := strconv.ParseBool(r.URL.Query().Get("body"))
	ctx, cancel := context.WithTimeout(r.Context(), h.o.Timeout)
	defer cancel()
	rec, err := h.o.Store.Get(ctx, k)
	if err != nil {
		h.storeFailed(w, r, "inspect", k.String(), err)
		return
	}
	h.log(r, "inspect", http.StatusOK, k.String(), "", slog.String("state", rec.State.String()), slog.String("route", rec.Route), slog.Bool("body", withBody))
	c := h.view(rec, withBody)
	h.addProbe(ctx, &c, rec)
	h.ok(w, r, "inspect", c)
}

// repairBody is the body of a release, and the part of a complete's that
// a release's has too: the operator's reason (required; it is logged) and,
// when set, the claim id that fences the resolution of an unknown record:
// it must still carry that claim.
type repairBody struct {
	Reason  string `json:"reason"`
	ClaimID string `json:"claim_id"`
}

// beginRepair starts a release or complete (action): it reads the key,
// decodes the body into req (body is its repairBody) and checks the
// reason, and reads the record's route for the log. On failure it has
// answered and ok is false; otherwise the caller calls cancel when done
// with ctx, the admin timeout's context.
func (h *Handler) beginRepair(w http.ResponseWriter, r *http.Request, action string, req any, body *repairBody) (k keystore.Key, ctx context.Context, cancel context.CancelFunc, route string, ok bool) {
	if k, ok = h.key(w, r, action); !ok {
		return k, nil, nil, "", false
	}
	if !h.decode(w, r, action, req) || !h.checkReason(w, r, action, body.Reason) {
		return k, nil, nil, "", false
	}
	ctx, cancel = context.WithTimeout(r.Context(), h.o.Timeout)
	return k, ctx, cancel, h.routeOf(ctx, k), true
}

// repair resolves k if it is an unknown record of body's claim, with resp
// (nil: released), or else runs force. A failure is answered and repair
// reports false.
func (h *Handler) repair(ctx context.Context, w http.ResponseWriter, r *http.Request, action string, k keystore.Key, body repairBody, route string, resp *keystore.Response, force func() error) bool {
	handled, err := h.resolveUnknown(ctx, k, body.ClaimID, resp)
	if !handled {
		err = force()
	}
	if err != nil {
		h.storeFailed(w, r, action, k.String(), err, slog.String("reason", body.Reason), slog.String("route", route))
		return false
	}
	return true
}

func (h *Handler) release(w http.ResponseWriter, r *http.Request) {
	var req repairBody
	k, ctx, cancel, route, ok := h.beginRepair(w, r, "release", &req, &req)
	if !ok {
		return
	}
	defer cancel()
	if !h.repair(ctx, w, r, "release", k, req, route, nil, func() error { return h.o.Store.ForceRelease(ctx, k) }) {
		return
	}
	h.log(r, "release", http.StatusOK, k.String(), req.Reason, slog.String("route", route))
	h.ok(w, r, "release", map[string]any{"key": k.String(), "action": "released", "route": route, "reason": req.Reason})
}

// completion is the body of a complete: the answer every retry will get.
type completion struct {
	repairBody
	Status     int                 `json:"status"`
	Headers    map[string][]string `json:"headers"`
	Body       *string             `json:"body"`
	BodyBase64 *string             `json:"body_base64"`
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request) {
	var req completion
	k, ctx, cancel, route, ok := h.beginRepair(w, r, "complete", &req, &req.repairBody)
	if !ok {
		return
	}
	defer cancel()
	resp, dropped, msg := h.answerOf(req, h.dropFor(route))
	if msg != "" {
		h.fail(w, r, "complete", http.StatusBadRequest, "invalid_request", msg)
		return
	}
	if !h.repair(ctx, w, r, "complete", k, req.repairBody, route, resp, func() error { return h.o.Store.ForceComplete(ctx, k, resp) }) {
		return
	}
	names := slices.Sorted(maps.Keys(resp.Header))
	if names == nil {
		names = []string{}
	}
	h.log(r, "complete", http.StatusOK, k.String(), req.Reason, slog.String("route", route),
		slog.Int("answer_status", resp.Status), slog.Any("answer_headers", names),
		slog.Any("dropped_headers", dropped), slog.Int("answer_bytes", len(resp.Body)))
	out := map[string]any{"key": k.String(), "action": "completed", "route": route, "reason": req.Reason, "status": resp.Status, "headers": names}
	if len(dropped) > 0 {
		out["dropped_headers"] = dropped
	}
	h.ok(w, r, "complete", out)
}

// dropFor returns the canonical names of the headers an answer for a
// record of route loses: the route's own drop_headers, or the global ones.
func (h *Handler) dropFor(route string) map[string]bool {
	if h.o.RouteDropHeaders != nil && route != "" {
		if names, ok := h.o.RouteDropHeaders(route); ok {
			return canonicalSet(names)
		}
	}
	return h.drop
}

func canonicalSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, name := range names {
		set[textproto.CanonicalMIMEHeaderKey(name)] = true
	}
	return set
}

// answerOf checks an operator's answer and converts it under the rules of
// an upstream's (DESIGN.md, Admin listener): headers in drop (the record's
// route's drop_headers), and the per-attempt Traceresponse and
// Server-Timing, are left out (dropped names them, sorted); a body over
// MaxResponseBytes is refused. msg says what is wrong with it.
func (h *Handler) answerOf(req completion, drop map[string]bool) (resp *keystore.Response, dropped []string, msg string) {
	resp, dropped, msg = h.answerOfChecked(req, drop)
	slices.Sort(dropped)
	return resp, slices.Compact(dropped), msg
}

func (h *Handler) answerOfChecked(req completion, drop map[string]bool) (resp *keystore.Response, dropped []string, msg string) {
	if msg := replayableStatus(req.Status); msg != "" {
		return nil, nil, msg
	}
	var body []byte
	switch {
	case req.Body != nil && req.BodyBase64 != nil:
		return nil, nil, "set body or body_base64, not both"
	case req.Body != nil:
		body = []byte(*req.Body)
	case req.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.BodyBase64)
		if err != nil {
			return nil, nil, "body_base64 is not standard base64"
		}
		body = b
	}
	if len(body) > 0 && !bodyAllowed(req.Status) {
		return nil, nil, fmt.Sprintf("a %d answer has no body (RFC 9110 §15.3.5, §15.3.6); a replay could not send one: leave body out", req.Status)
	}
	if int64(len(body)) > h.o.MaxResponseBytes {
		return nil, nil, fmt.Sprintf("the body is %d bytes; stored answers are at most %d (idempotency.max_response_bytes)", len(body), h.o.MaxResponseBytes)
	}
	hdr := make(http.Header, len(req.Headers))
	for name, vals := range req.Headers {
		if !httpguts.ValidHeaderFieldName(name) {
			return nil, nil, fmt.Sprintf("header name %q is not valid", name)
		}
		cname := textproto.CanonicalMIMEHeaderKey(name)
		switch cname {
		case "Content-Length", "Date", "Connection", "Transfer-Encoding", "Keep-Alive", "Upgrade", "Trailer", "Te", "Proxy-Connection":
			return nil, nil, fmt.Sprintf("header %q is set by idemgate on every replay (or is hop-by-hop); leave it out", cname)
		}
		for _, v := range vals {
			if !validFieldValue(v) {
				return nil, nil, fmt.Sprintf("header %q has a value with a control character (CR, LF, NUL, …); a replay could not send it", cname)
			}
		}
		if drop[cname] || cname == "Traceresponse" || cname == "Server-Timing" {
			dropped = append(dropped, cname)
			continue
		}
		hdr[cname] = append(hdr[cname], vals...)
	}
	if len(hdr) == 0 {
		hdr = nil
	}
	return &keystore.Response{Status: req.Status, Header: hdr, Body: body}, dropped, ""
}

// replayableStatus returns why status cannot be an operator's answer, or
// "": a replay answers a new request with it, so it must be a final status
// (not 1xx: 100 Continue and 101 Switching Protocols are interim answers
// to a connection, and net/http never sends them as a response), and not
// 304, which answers only a conditional request's validators.
func replayableStatus(status int) string {
	switch {
	case status < 100 || status > 599:
		return fmt.Sprintf("status %d is not an HTTP status; want a final status from 200 to 599", status)
	case status < 200:
		return fmt.Sprintf("status %d is an interim (1xx) answer, which a replay cannot give; want a final status from 200 to 599", status)
	case status == http.StatusNotModified:
		return "status 304 answers a conditional request's validators; a replay to another request cannot give it (store the full answer, e.g. 200)"
	}
	return ""
}

// bodyAllowed reports whether an answer with status may carry a body: not
// 204 No Content or 205 Reset Content (net/http drops a 204's body).
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusResetContent
}

// validFieldValue reports whether v is a header value a server can send
// (RFC 9110 §5.5: visible ASCII, space, tab and obs-text; HTTP/2 refuses
// the rest).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// keyRequest is the body of POST /admin/keys.
type keyRequest struct {
	Tenant         *string                    `json:"tenant"`
	Host           string                     `json:"host"`
	Identity       map[string][]string        `json:"identity"` // headers
	Cookies        map[string]string          `json:"cookies"`
	Claims         map[string]json.RawMessage `json:"claims"`
	IdempotencyKey string                     `json:"idempotency_key"`
}

func (h *Handler) computeKey(w http.ResponseWriter, r *http.Request) {
	if h.o.ScopeKey == nil {
		h.fail(w, r, "key", http.StatusNotFound, "not_found", "computing keys is not available")
		return
	}
	var req keyRequest
	if !h.decode(w, r, "key", &req) {
		return
	}
	if req.IdempotencyKey == "" {
		h.fail(w, r, "key", http.StatusBadRequest, "invalid_request", "idempotency_key is required")
		return
	}
	tenant := ""
	switch {
	case req.Tenant != nil && req.Host != "":
		h.fail(w, r, "key", http.StatusBadRequest, "invalid_request", "set tenant or host, not both")
		return
	case req.Tenant != nil:
		tenant = *req.Tenant
	case req.Host != "":
		if h.o.TenantFor == nil {
			h.fail(w, r, "key", http.StatusBadRequest, "invalid_request", "host is not supported; set tenant")
			return
		}
		t, ok := h.o.TenantFor(req.Host)
		if !ok {
			h.fail(w, r, "key", http.StatusBadRequest, "invalid_request", "host has no entry in idempotency.tenant_hosts: its keyed writes are refused (421 tenant_unknown)")
			return
		}
		tenant = t
	}
	identity := make(http.Header, len(req.Identity)+1)
	for name, vals := range req.Identity {
		identity[textproto.CanonicalMIMEHeaderKey(name)] = vals
	}
	if len(req.Cookies) > 0 {
		names := slices.Sorted(maps.Keys(req.Cookies))
		var line []string
		for _, name := range names {
			// The value as the client sent it after "=" (quotes and all):
			// the identity reads cookies byte for byte, not as net/http's
			// parser does, so any value a Cookie line can carry is
			// accepted; one the identity cannot read fails below.
			v := req.Cookies[name]
			if !cookieSendable(name, v) {
				h.fail(w, r, "key", http.StatusBadRequest, "invalid_request", fmt.Sprintf("cookie %q: not a name and value a client can send", name))
				return
			}
			line = append(line, name+"="+v)
		}
		identity.Add("Cookie", strings.Join(line, "; "))
	}
	k, err := h.o.ScopeKey(tenant, identity, req.Claims, req.IdempotencyKey)
	if err != nil {
		// The error names claims, never their values.
		h.fail(w, r, "key", http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	// Never logged: the identity values and the client's key.
	h.log(r, "key", http.StatusOK, k.String(), "")
	h.ok(w, r, "key", map[string]any{"key": k.String(), "tenant": tenant})
}

// routeOf returns the record's route for the log, or "".
func (h *Handler) routeOf(ctx context.Context, k keystore.Key) string {
	rec, err := h.o.Store.Get(ctx, k)
	if err != nil {
		return ""
	}
	return rec.Route
}

func (h *Handler) checkReason(w http.ResponseWriter, r *http.Request, action, reason string) bool {
	switch {
	case strings.TrimSpace(reason) == "":
		h.fail(w, r, action, http.StatusBadRequest, "reason_required", "a reason is required: say why this repair is safe (it is logged)")
		return false
	case len(reason) > maxReasonBytes || !utf8.ValidString(reason):
		h.fail(w, r, action, http.StatusBadRequest, "invalid_request", fmt.Sprintf("the reason must be UTF-8, at most %d bytes", maxReasonBytes))
		return false
	}
	return true
}

// decode reads a JSON body strictly: unknown fields are refused, so that a
// typo never silently drops part of an operator's answer.
func (h *Handler) decode(w http.ResponseWriter, r *http.Request, action string, v any) bool {
	limit := 4*h.o.MaxResponseBytes/3 + 64<<10 // base64 of the largest body, plus headers
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.fail(w, r, action, http.StatusRequestEntityTooLarge, "request_too_large", "the request body is too large")
			return false
		}
		h.fail(w, r, action, http.StatusBadRequest, "invalid_request", "the body must be one JSON object: "+err.Error())
		return false
	}
	if dec.More() {
		h.fail(w, r, action, http.StatusBadRequest, "invalid_request", "the body must be one JSON object")
		return false
	}
	return true
}

// storeFailed answers a store error: not found, not in flight, or the store
// unreachable.
func (h *Handler) storeFailed(w http.ResponseWriter, r *http.Request, action, key string, err error, attrs ...slog.Attr) {
	status, code, detail := http.StatusServiceUnavailable, "store_unavailable", "the store could not be reached; nothing was changed"
	switch {
	case errors.Is(err, keystore.ErrNotFound):
		status, code, detail = http.StatusNotFound, "not_found", "no record has this key (never claimed, released, or expired)"
	case errors.Is(err, keystore.ErrLeaseLost):
		status, code, detail = http.StatusConflict, "not_in_flight", "the record is not in flight or unknown under this claim (it completed, was released or resolved meanwhile; the first resolution wins); nothing was changed"
	default:
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	h.log(r, action, status, key, "", attrs...)
	h.problem(w, r, action, status, code, detail)
}

// fail answers a refused request and logs it.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, action string, status int, code, detail string) {
	h.log(r, action, status, "", "", slog.String("code", code))
	h.problem(w, r, action, status, code, detail)
}

func (h *Handler) problem(w http.ResponseWriter, r *http.Request, action string, status int, code, detail string) {
	h.count(action, status)
	p := problem.Problem{Status: status, Code: code, Title: http.StatusText(status), Detail: detail}
	problem.Write(w, r, problem.JSON{}, p, r.Header.Get(h.requestIDHeader()))
}

func (h *Handler) ok(w http.ResponseWriter, r *http.Request, action string, v any) {
	h.count(action, http.StatusOK)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func (h *Handler) count(action string, status int) {
	if h.requests != nil {
		h.requests.WithLabelValues(action, strconv.Itoa(status)).Inc()
	}
}

// log writes the one line of an admin request: every action is logged,
// with the operator's reason for repairs.
func (h *Handler) log(r *http.Request, action string, status int, key, reason string, attrs ...slog.Attr) {
	level := slog.LevelInfo
	switch {
	case status == http.StatusUnauthorized:
		level = slog.LevelWarn
	case status >= 500:
		level = slog.LevelError
	}
	base := []slog.Attr{
		slog.String("action", action),
		slog.Int("status", status),
		slog.String("method", r.Method),
		slog.String("path", r.URL.Path),
		slog.String("remote", r.RemoteAddr),
		slog.String("request_id", r.Header.Get(h.requestIDHeader())),
	}
	if key != "" {
		base = append(base, slog.String("key", key))
	}
	if reason != "" {
		base = append(base, slog.String("reason", reason))
	}
	h.o.Logger.LogAttrs(context.Background(), level, "admin request", append(base, attrs...)...)
}

// cookieSendable reports whether a client can send the cookie name=v in a
// Cookie line, where the identity would read v: name a token, v without
// ";", control bytes and trailing white space (a pair is trimmed).
func cookieSendable(name, v string) bool {
	if name == "" || strings.ContainsFunc(name, func(c rune) bool {
		return c > 0x7e || c <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c)
	}) {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == ';' || c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return strings.TrimRight(v, " \t") == v
}
