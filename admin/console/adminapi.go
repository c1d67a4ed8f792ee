package console

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/internal/problem"
)

// claim is a record as the admin API lists it: package admin's [admin.Claim],
// the one shape of the API's answers, with what the templates ask of it.
type claim struct {
	admin.Claim
}

// InFlight reports whether the claim's request may still be running: in
// flight with its lease not yet over.
func (c claim) InFlight() bool {
	return c.State == "in_flight" && c.LeaseExpired != nil && !*c.LeaseExpired
}

// apiResult is an admin API answer.
type apiResult struct {
	Status int
	Body   []byte
}

// Detail is a refusal's problem detail, or "".
func (a apiResult) Detail() string {
	var p struct {
		Detail string `json:"detail"`
	}
	json.Unmarshal(a.Body, &p)
	return p.Detail
}

// recorder is the http.ResponseWriter of an in-process admin API call.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

// callAdmin sends one request to the admin API in process, with the Bearer
// token, the console request's remote address and request id (so that the
// admin log line names the operator's connection), and body as JSON.
func (h *Handler) callAdmin(ctx context.Context, from *http.Request, method, path string, query url.Values, body any) apiResult {
	var rd bytes.Buffer
	if body != nil {
		json.NewEncoder(&rd).Encode(body)
	}
	u := &url.URL{Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), &rd)
	if err != nil {
		return apiResult{Status: http.StatusInternalServerError}
	}
	req.Host = from.Host
	req.RemoteAddr = from.RemoteAddr
	req.Header.Set("Authorization", "Bearer "+h.o.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "idemgate-console")
	req.Header.Set(problem.RequestIDHeader, from.Header.Get(problem.RequestIDHeader))
	rec := &recorder{h: http.Header{}}
	h.o.Admin.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return apiResult{Status: rec.status, Body: rec.body.Bytes()}
}

// listClaims lists in-flight claims (GET /admin/claims).
func (h *Handler) listClaims(ctx context.Context, r *http.Request) ([]claim, bool, string) {
	res := h.callAdmin(ctx, r, http.MethodGet, "/admin/claims", url.Values{"limit": {"200"}}, nil)
	if res.Status != http.StatusOK {
		return nil, false, res.Detail()
	}
	var out struct {
		Claims    []claim `json:"claims"`
		Truncated bool    `json:"truncated"`
	}
	json.Unmarshal(res.Body, &out)
	return out.Claims, out.Truncated, ""
}

// listUnknown lists unknown records (GET /admin/unknown). available is
// false when the admin API has no such listing (its store keeps none).
func (h *Handler) listUnknown(ctx context.Context, r *http.Request) (recs []claim, available bool, errMsg string) {
	var out struct {
		Unknown []claim `json:"unknown"`
	}
	available, errMsg = h.listing(ctx, r, "/admin/unknown", url.Values{"limit": {"200"}}, &out)
	return out.Unknown, available, errMsg
}

// listing reads an optional listing of the admin API (GET path?q) into
// out. available is false when the admin API has no such listing (404);
// errMsg is the API's problem detail on any other failure.
func (h *Handler) listing(ctx context.Context, r *http.Request, path string, q url.Values, out any) (available bool, errMsg string) {
	res := h.callAdmin(ctx, r, http.MethodGet, path, q, nil)
	switch res.Status {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, ""
	default:
		return true, res.Detail()
	}
	json.Unmarshal(res.Body, out)
	return true, ""
}

// inspect reads one record (GET /admin/claims/{key}).
func (h *Handler) inspect(ctx context.Context, r *http.Request, key string) (claim, apiResult) {
	res := h.callAdmin(ctx, r, http.MethodGet, "/admin/claims/"+url.PathEscape(key), nil, nil)
	var c claim
	if res.Status == http.StatusOK {
		json.Unmarshal(res.Body, &c)
	}
	return c, res
}

// limiterClients is one limiter's busiest clients, as GET
// /admin/limits/clients lists them (package admin's LimiterClients).
type limiterClients struct {
	Limiter string `json:"limiter"`
	Route   string `json:"route"`
	Clients []struct {
		Client       string `json:"client"`
		Requests     uint64 `json:"requests"`
		MaxOvercount uint64 `json:"max_overcount"`
		Refused      uint64 `json:"refused"`
	} `json:"clients"`
}

// listBusiest lists the limiters' busiest clients (GET
// /admin/limits/clients). available is false when the admin API counts
// none.
func (h *Handler) listBusiest(ctx context.Context, r *http.Request) (out []limiterClients, available bool, errMsg string) {
	var body struct {
		Limiters []limiterClients `json:"limiters"`
	}
	available, errMsg = h.listing(ctx, r, "/admin/limits/clients", nil, &body)
	return body.Limiters, available, errMsg
}
