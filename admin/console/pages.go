package console

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/problem"
)

// maxFormBytes bounds a form's body (an operator's answer is at most the
// admin API's cap; the API refuses more).
const maxFormBytes = 1 << 20

var funcs = template.FuncMap{
	"age": func(sec float64) string {
		return time.Duration(sec * float64(time.Second)).Truncate(time.Second).String()
	},
	"dur": func(d time.Duration) string { return d.Truncate(time.Second).String() },
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"num": func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) },
	"outcomes": func(m map[string]float64) string {
		var parts []string
		for _, k := range slices.Sorted(mapKeys(m)) {
			if m[k] > 0 {
				parts = append(parts, fmt.Sprintf("%s %s", k, strconv.FormatFloat(m[k], 'f', -1, 64)))
			}
		}
		if len(parts) == 0 {
			return "—"
		}
		return strings.Join(parts, ", ")
	},
	"short": func(s string) string {
		if len(s) > 16 {
			return s[:16] + "…"
		}
		return s
	},
}

func mapKeys(m map[string]float64) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// page is what every template gets.
type page struct {
	Title    string
	CSRF     string // "": logged out
	Flash    string
	FlashErr string
	Data     any
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, p page) {
	var buf bytes.Buffer
	if err := h.tmpl.ExecuteTemplate(&buf, name, p); err != nil {
		h.o.Logger.Error("console template failed", "template", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// refuse answers a refused request with a small page.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, status, "error.html", page{Title: http.StatusText(status), FlashErr: msg})
}

// authed wraps a page that needs a session: without one, GET goes to the
// login page and POST is refused; a POST must carry the session's CSRF
// token.
func (h *Handler) authed(next func(http.ResponseWriter, *http.Request, session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := problem.RequestID(r.Header.Get(problem.RequestIDHeader))
		r.Header.Set(problem.RequestIDHeader, id)
		var x session
		ok := false
		if c, err := r.Cookie(cookieName); err == nil {
			x, ok = h.sessions.get(c.Value)
		}
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
				return
			}
			h.o.Logger.Warn("console request refused: no session", "remote", r.RemoteAddr, "path", r.URL.Path)
			h.refuse(w, r, http.StatusUnauthorized, "Your session has ended. Log in again.")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			if err := r.ParseForm(); err != nil || !csrfOK(x, r.PostForm.Get("csrf")) {
				h.o.Logger.Warn("console request refused: CSRF token missing or wrong", "remote", r.RemoteAddr, "path", r.URL.Path)
				h.refuse(w, r, http.StatusForbidden, "This form has expired or was not sent from the console. Reload the page and try again.")
				return
			}
		}
		next(w, r, x)
	})
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "login.html", page{Title: "Log in"})
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !h.logins.allow() {
		w.Header().Set("Retry-After", "1")
		h.o.Logger.Warn("console login refused: too many attempts", "remote", r.RemoteAddr)
		h.render(w, http.StatusTooManyRequests, "login.html", page{Title: "Log in", FlashErr: "Too many login attempts. Wait a moment and try again."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil || !h.tokenOK(r.PostForm.Get("token")) {
		h.o.Logger.Warn("console login failed", "remote", r.RemoteAddr)
		h.render(w, http.StatusUnauthorized, "login.html", page{Title: "Log in", FlashErr: "That is not the admin token."})
		return
	}
	// A session id the client brought along is never kept (fixation).
	if c, err := r.Cookie(cookieName); err == nil {
		h.sessions.end(c.Value)
	}
	x := h.sessions.create()
	setCookie(w, r, x.id, int(h.o.MaxAge/time.Second))
	h.o.Logger.Info("console login", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, x session) {
	h.sessions.end(x.id)
	setCookie(w, r, "", -1)
	h.o.Logger.Info("console logout", "remote", r.RemoteAddr)
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// dashboard is the console's one overview page.
type dashboard struct {
	Routes            []Route
	RoutesAvailable   bool
	Claims            []claim
	ClaimsTruncated   bool
	ClaimsErr         string
	Unknown           []claim
	UnknownAvailable  bool
	UnknownErr        string
	Sessions          Sessions
	SessionsAvailable bool
	Health            Health
	HealthAvailable   bool
	Config            ConfigStatus
	ConfigAvailable   bool
	Limits            []Limit
	LimitsAvailable   bool
	Busiest           []limiterClients
	BusiestAvailable  bool
	BusiestErr        string
	Now               time.Time
}

func (h *Handler) dashboard(w http.ResponseWriter, r *http.Request, x session) {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	d := dashboard{Now: h.o.Now().UTC()}
	d.Claims, d.ClaimsTruncated, d.ClaimsErr = h.listClaims(ctx, r)
	d.Unknown, d.UnknownAvailable, d.UnknownErr = h.listUnknown(ctx, r)
	d.Busiest, d.BusiestAvailable, d.BusiestErr = h.listBusiest(ctx, r)
	if h.o.Routes != nil {
		d.Routes, d.RoutesAvailable = h.o.Routes(), true
	}
	if h.o.Sessions != nil {
		d.Sessions, d.SessionsAvailable = h.o.Sessions(), true
		for i := range d.Sessions.Oldest {
			s := &d.Sessions.Oldest[i]
			s.Age = max(0, d.Now.Sub(s.Since))
			s.Stuck = d.Sessions.StuckAfter > 0 && s.Age >= d.Sessions.StuckAfter
		}
	}
	if h.o.Health != nil {
		d.Health, d.HealthAvailable = h.o.Health(ctx), true
	}
	if h.o.Config != nil {
		d.Config, d.ConfigAvailable = h.o.Config(), true
	}
	if h.o.Limits != nil {
		d.Limits, d.LimitsAvailable = h.o.Limits(), true
	}
	msg, errMsg := h.sessions.takeFlash(x.id)
	h.render(w, http.StatusOK, "dashboard.html", page{Title: "idemgate console", CSRF: x.csrf, Flash: msg, FlashErr: errMsg, Data: d})
}

// claimView is the resolve page of one record.
type claimView struct {
	Claim  claim
	Key    string
	Values url.Values // the form as sent, when shown again
	// NeedConfirm asks the operator to confirm a release of a request that
	// may still be running.
	NeedConfirm bool
}

func (h *Handler) claimPage(w http.ResponseWriter, r *http.Request, x session) {
	h.showClaim(w, r, x, http.StatusOK, "", nil, false)
}

func (h *Handler) showClaim(w http.ResponseWriter, r *http.Request, x session, status int, errMsg string, form url.Values, confirm bool) {
	key := r.PathValue("key")
	c, res := h.inspect(r.Context(), r, key)
	if res.Status != http.StatusOK {
		h.sessions.setFlash(x.id, "", "Record "+key+": "+res.Detail())
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	h.render(w, status, "claim.html", page{Title: "Resolve a record", CSRF: x.csrf, FlashErr: errMsg,
		Data: claimView{Claim: c, Key: key, Values: form, NeedConfirm: confirm}})
}

func (h *Handler) release(w http.ResponseWriter, r *http.Request, x session) {
	key := r.PathValue("key")
	f := r.PostForm
	c, res := h.inspect(r.Context(), r, key)
	if res.Status == http.StatusOK && c.InFlight() && f.Get("confirm") != "yes" {
		h.showClaim(w, r, x, http.StatusConflict, "This request may still be running (its lease has not ended): releasing it lets a retry run the write again. Tick the confirmation to release it anyway.", f, true)
		return
	}
	body := map[string]any{"reason": f.Get("reason")}
	if id := f.Get("claim_id"); id != "" {
		body["claim_id"] = id
	}
	h.act(w, r, x, "release", "released", key, body, f)
}

func (h *Handler) complete(w http.ResponseWriter, r *http.Request, x session) {
	key := r.PathValue("key")
	f := r.PostForm
	status, err := strconv.Atoi(strings.TrimSpace(f.Get("status")))
	if err != nil {
		h.showClaim(w, r, x, http.StatusBadRequest, "The status must be a number, like 201.", f, false)
		return
	}
	body := map[string]any{"reason": f.Get("reason"), "status": status, "body": f.Get("body")}
	if ct := strings.TrimSpace(f.Get("content_type")); ct != "" {
		body["headers"] = map[string][]string{"Content-Type": {ct}}
	}
	if id := f.Get("claim_id"); id != "" {
		body["claim_id"] = id
	}
	h.act(w, r, x, "complete", "completed", key, body, f)
}

// act sends a repair to the admin API; success goes back to the overview
// with a message, a refusal shows the form again with the API's detail.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, x session, action, done, key string, body map[string]any, f url.Values) {
	res := h.callAdmin(r.Context(), r, http.MethodPost, "/admin/claims/"+url.PathEscape(key)+"/"+action, nil, body)
	if res.Status != http.StatusOK {
		h.o.Logger.LogAttrs(r.Context(), slog.LevelInfo, "console action refused", slog.String("action", action), slog.Int("status", res.Status), slog.String("key", key))
		h.showClaim(w, r, x, res.Status, res.Detail(), f, false)
		return
	}
	h.sessions.setFlash(x.id, fmt.Sprintf("Record %s %s.", key, done), "")
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}
