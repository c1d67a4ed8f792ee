package proxy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// storeTimeout bounds each store call made for a request.
const storeTimeout = 5 * time.Second

// idempotency is DESIGN.md steps 4 (key check), 5 (claim) and 8 (record)
// for routes with idempotent: true. Everything else passes through.
func (p *Proxy) idempotency(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		rt := ex.route
		if rt == nil || !rt.Idempotent {
			next.ServeHTTP(w, r)
			return
		}
		if rt.Observe {
			p.observe(w, r, next) // observe.go
			return
		}
		opts := &p.opts.Idempotency

		// 4. Key check.
		vals := r.Header.Values(opts.Header)
		if rt.Protocol == ProtocolGraphQL {
			p.serveGraphQL(w, r, next, vals) // graphql.go
			return
		}
		if len(vals) > 1 {
			WriteProblem(w, r, p.keyInvalid())
			return
		}
		if len(vals) == 0 || vals[0] == "" {
			if rt.RequireKey {
				WriteProblem(w, r, ProblemKeyMissing)
				return
			}
			ex.outcome = OutcomeUnprotected
			next.ServeHTTP(w, r)
			return
		}
		key := vals[0]
		if !ValidKey(key) {
			WriteProblem(w, r, p.keyInvalid())
			return
		}
		if opts.RequireIdentity && !p.hasIdentity(r) {
			WriteProblem(w, r, ProblemIdentityMissing)
			return
		}

		// The body is read whole before anything else happens.
		body, release, prob := p.readBody(w, r)
		if prob != nil {
			WriteProblem(w, r, *prob)
			return
		}
		defer release()
		if prob := p.serveKeyed(w, r, next, key, body); prob != nil {
			WriteProblem(w, r, *prob)
		}
	})
}

func (p *Proxy) keyInvalid() Problem {
	pr := ProblemKeyInvalid
	pr.Detail = p.opts.Idempotency.Header + " is not valid"
	return pr
}

// ValidKey reports whether key is 1–255 characters from '!' (0x21) to '~'
// (0x7E), as DESIGN.md step 4 requires.
func ValidKey(key string) bool {
	if len(key) == 0 || len(key) > 255 {
		return false
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < '!' || c > '~' {
			return false
		}
	}
	return true
}

func (p *Proxy) hasIdentity(r *http.Request) bool {
	for _, h := range p.opts.Idempotency.IdentityHeaders {
		if len(r.Header.Values(h)) > 0 {
			return true
		}
	}
	return false
}

// scope returns the store key of a request: the tenant, the exact values of
// the identity headers and the client's key, hashed.
func (p *Proxy) scope(r *http.Request, key string) keystore.Key {
	return p.ScopeKey(p.tenant(r.Host), r.Header, key)
}

// ScopeKey returns the store key of the idempotency key key sent under
// tenant with the identity headers in identity (only the configured
// identity headers are read, their values exactly as sent, in order). It is
// how the admin API finds a record without its hex key; see
// [Proxy.TenantFor] for a request's tenant.
func (p *Proxy) ScopeKey(tenant string, identity http.Header, key string) keystore.Key {
	opts := &p.opts.Idempotency
	parts := make([]string, 0, 3+2*len(opts.IdentityHeaders))
	parts = append(parts, "v1", tenant)
	for _, h := range opts.IdentityHeaders {
		vs := identity.Values(h)
		parts = append(parts, strconv.Itoa(len(vs)))
		parts = append(parts, vs...)
	}
	parts = append(parts, key)
	return keystore.NewKey(parts...)
}

// TenantFor returns the tenant of a request with this Host header: the
// tenant_hosts entry for the host, else the constant tenant.
func (p *Proxy) TenantFor(host string) string { return p.tenant(host) }

// tenant returns the tenant for a Host: the tenant_hosts entry for the host
// (with its port, then without), else the constant tenant.
func (p *Proxy) tenant(host string) string {
	opts := &p.opts.Idempotency
	if len(opts.TenantHosts) > 0 {
		h := strings.ToLower(host)
		if t, ok := opts.TenantHosts[h]; ok {
			return t
		}
		if hh, _, err := net.SplitHostPort(h); err == nil {
			if t, ok := opts.TenantHosts[strings.Trim(hh, "[]")]; ok {
				return t
			}
		}
	}
	return opts.Tenant
}

// readBody reads a keyed request's body whole, within max_body_bytes and
// the max_buffered_bytes budget, and puts it back for the upstream. The
// caller must call release when the request is done.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), prob *Problem) {
	limit := p.opts.Idempotency.MaxBodyBytes
	if r.ContentLength > limit {
		return nil, nil, &ProblemRequestTooLarge
	}
	hold := limit
	if r.ContentLength >= 0 {
		hold = r.ContentLength
	}
	if p.buffered.Add(hold) > p.opts.MaxBufferedBytes {
		p.buffered.Add(-hold)
		return nil, nil, &ProblemOverloaded
	}
	release = func() { p.buffered.Add(-hold) }
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return nil, release, nil
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 512)))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		release()
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, nil, &ProblemRequestTooLarge
		}
		// The client went away or sent a broken body: nothing was claimed.
		pr := ProblemRequestTooLarge
		pr.Status, pr.Code, pr.Title, pr.Detail = http.StatusBadRequest, "request_body_invalid", "Request body unreadable", "The request body could not be read"
		return nil, nil, &pr
	}
	body = buf.Bytes()
	rb := &bufferedBody{}
	rb.Reset(body)
	r.Body = rb
	r.ContentLength = int64(len(body))
	r.GetBody = nil
	return body, release, nil
}

// bufferedBody is a read body held in memory: one allocation where
// io.NopCloser(bytes.NewReader(b)) takes two. It has no GetBody, so the
// Transport can never resend it.
type bufferedBody struct{ bytes.Reader }

func (*bufferedBody) Close() error { return nil }

// serveKeyed claims the key, runs the request and records its answer.
func (p *Proxy) serveKeyed(w http.ResponseWriter, r *http.Request, next http.Handler, key string, body []byte) *Problem {
	ex := exchangeOf(r)
	rt := ex.route
	opts := &p.opts.Idempotency
	sk := p.scope(r, key)
	var fp keystore.Fingerprint
	if ex.gql != nil {
		fp = Fingerprint(rt.Name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, "", graphqlFingerprintBody(ex.gql), nil)
	} else {
		fp = Fingerprint(rt.Name, r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Content-Type"), body, rt.ignore)
	}

	// 5. Claim. Stores bound their own calls (the Redis client's timeout);
	// a client that hangs up cancels the claim.
	res, err := p.opts.Store.Reserve(r.Context(), sk, keystore.ReserveOptions{
		Fingerprint: fp,
		Route:       rt.Name,
		Lease:       opts.Lease,
		Retention:   opts.Retention,
	})
	switch {
	case err == nil:
	case errors.Is(err, keystore.ErrInFlight):
		return &ProblemInProgress
	case errors.Is(err, keystore.ErrFingerprintMismatch):
		pr := ProblemKeyReused
		pr.Status = opts.ReuseStatus
		return &pr
	case r.Context().Err() != nil:
		ex.outcome = OutcomeRejected
		return nil // the client left; logged as 499
	default:
		p.log.Error("idempotency store unavailable", "error", err, logRequestID, ex.id, logRoute, rt.Name)
		return &ProblemUnavailable
	}
	if res.Response != nil {
		if res.Response.TooLarge {
			return &ProblemResponseTooLarge
		}
		p.replay(w, r, res.Response)
		return nil
	}

	p.runClaimed(w, r, next, sk, res)
	return nil
}

// runClaimed runs a request under its new claim and records its answer.
func (p *Proxy) runClaimed(w http.ResponseWriter, r *http.Request, next http.Handler, sk keystore.Key, res keystore.Reservation) {
	ex := exchangeOf(r)
	opts := &p.opts.Idempotency
	// Claimed: the lease is renewed for as long as the request lives.
	if res.Takeover {
		p.log.Warn("took over an abandoned claim", logRequestID, ex.id, logRoute, ex.route.Name)
	}
	lease := p.renewals.start(sk, res.Token, opts.Lease, opts.MaxLease)
	ex.keyed = true
	ex.outcome = OutcomeExecuted
	recorded := false
	// finish records the answer once: as soon as the capture has the whole
	// answer (before its last bytes go to the client, so a retry sent after
	// the answer arrived always finds it stored), or when the request ends.
	ex.finish = func() {
		if recorded {
			return
		}
		recorded = true
		lease.stop()
		p.record(r, ex, sk, res.Token, ex.capture)
	}
	// Runs on a panic too (ErrAbortHandler when the upstream's body broke
	// mid-stream): the claim is then kept.
	defer ex.finish()
	next.ServeHTTP(w, r)
}

// record is DESIGN.md step 8: store the answer, release the key, or keep
// the claim until its lease ends when the outcome is unknown.
func (p *Proxy) record(r *http.Request, ex *exchange, sk keystore.Key, token uint64, c *capture) {
	opts := &p.opts.Idempotency
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), storeTimeout)
	defer cancel()
	var resp *keystore.Response
	if ex.sent == answered && c != nil {
		resp = c.response()
	}
	switch {
	case ex.sent == notSent:
		// Nothing reached the upstream (refused, or turned away before it
		// was forwarded): the retry may run.
		if err := p.opts.Store.Release(ctx, sk, token); err != nil && !errors.Is(err, keystore.ErrLeaseLost) {
			p.log.Error("releasing key failed", "error", err, logRequestID, ex.id)
		}
	case resp == nil:
		// Timeout or broken connection: the upstream may have run it. The
		// claim stays until its lease ends; a retry gets 409, then takes over.
		if ex.outcome == OutcomeExecuted {
			ex.outcome = OutcomeUpstreamError
		}
	case ex.gql != nil && p.releaseGraphQL(ex.gql, resp.Status, resp.Body),
		ex.gql == nil && resp.Status < len(p.release) && p.release[resp.Status]:
		ex.outcome = OutcomeReleased
		if err := p.opts.Store.Release(ctx, sk, token); err != nil && !errors.Is(err, keystore.ErrLeaseLost) {
			p.log.Error("releasing key failed", "error", err, logRequestID, ex.id)
		}
	default:
		p.complete(ctx, ex, sk, token, resp, opts.Lease)
	}
}

// complete stores resp. The first attempt is made at once, before the
// answer's last bytes reach the client; if the store fails, the retries
// (within half the lease) run in the background, so that a slow or broken
// store never holds the client's connection.
func (p *Proxy) complete(ctx context.Context, ex *exchange, sk keystore.Key, token uint64, resp *keystore.Response, lease time.Duration) {
	err := p.opts.Store.Complete(ctx, sk, token, resp)
	if p.completed(ex.id, err, 1) {
		return
	}
	id := ex.id
	p.renewals.background(func() {
		deadline := time.Now().Add(lease / 2)
		backoff := 50 * time.Millisecond
		for attempt := 2; time.Now().Add(backoff).Before(deadline); attempt++ {
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
			err = p.opts.Store.Complete(ctx, sk, token, resp)
			cancel()
			if p.completed(id, err, attempt) {
				return
			}
		}
		p.log.Error("storing answer failed; the key will be taken over after its lease", "error", err, logRequestID, id)
	})
}

// completed reports whether a Complete attempt settled the record: stored,
// or no longer ours to store.
func (p *Proxy) completed(requestID string, err error, attempt int) bool {
	switch {
	case err == nil:
		if attempt > 1 {
			p.log.Info("answer stored after a retry", "attempts", attempt, logRequestID, requestID)
		}
		return true
	case errors.Is(err, keystore.ErrLeaseLost), errors.Is(err, keystore.ErrNotFound):
		// Taken over (or repaired by an operator) while we ran: the record
		// belongs to someone else now; our client still got our answer.
		p.log.Warn("late completion rejected", "error", err, logRequestID, requestID)
		return true
	}
	p.log.Warn("storing answer failed; retrying", "error", err, "attempt", attempt, logRequestID, requestID)
	return false
}

// replay answers with a stored response (DESIGN.md, Replays).
func (p *Proxy) replay(w http.ResponseWriter, r *http.Request, resp *keystore.Response) {
	ex := exchangeOf(r)
	ex.outcome = OutcomeReplayed
	h := w.Header()
	for k, v := range resp.Header {
		if k == requestIDHeader {
			continue
		}
		h[k] = v
	}
	if rh := p.opts.Idempotency.ReplayHeader; rh != "" {
		h.Set(rh, "true")
	}
	if bodyAllowed(resp.Status) {
		h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	}
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead && bodyAllowed(resp.Status) {
		w.Write(resp.Body)
	}
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
