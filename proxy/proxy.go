package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/limiter"
)

// Proxy is the idemgate pipeline. It is an http.Handler, safe for
// concurrent use. Build it with [New].
type Proxy struct {
	handler    http.Handler // the whole chain (chain.go)
	log        *slog.Logger
	opts       Options
	cur        atomic.Pointer[stages] // see Reload
	upstream   http.Handler           // step 7, shared by every stages value
	metrics    *Metrics
	releasable [600]bool // statuses after which the key is released
	drop       map[string]bool
	budget     *budget.Budget // max_buffered_bytes: keyed bodies held (body.go)
	renewals   renewer
	notices    keystore.Notices // completion notices (wait.go)
	waiters    waiters
	late       lateCalls // upstream calls kept past their timeout (late.go)
	probes     *prober   // reconcile probes (reconcile.go)
	// defIdentity is the identity when the stages name none: the exact
	// values of Idempotency.IdentityHeaders.
	defIdentity *identity.Resolver
}

// absolute reports whether u can be an upstream: an absolute URL.
func absolute(u *url.URL) bool { return u != nil && u.Scheme != "" && u.Host != "" }

// defaultTimeout is the upstream timeout when none is set.
const defaultTimeout = 60 * time.Second

// newProxy checks opts and fills in their defaults.
func newProxy(opts Options) (*Proxy, error) {
	if !absolute(opts.Upstream) {
		return nil, errors.New("proxy: Upstream must be an absolute URL")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.Transport == nil {
		opts.Transport = NewTransport()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBufferedBytes <= 0 {
		opts.MaxBufferedBytes = 256 << 20
	}
	if opts.RequestBodyTimeout <= 0 {
		opts.RequestBodyTimeout = 30 * time.Second
	}
	if opts.ClientAddr == nil {
		opts.ClientAddr = limiter.ClientAddr
	}
	id := &opts.Idempotency
	if id.Header == "" {
		id.Header = "Idempotency-Key"
	}
	id.Header = http.CanonicalHeaderKey(id.Header)
	if id.TenantFor == nil {
		id.TenantFor = func(string) (string, bool) { return "", true }
	}
	if id.Retention <= 0 {
		id.Retention = 25 * time.Hour
	}
	if id.Lease <= 0 {
		id.Lease = 120 * time.Second
	}
	if id.MaxLease < id.Lease {
		id.MaxLease = max(60*time.Minute, id.Lease)
	}
	if id.MaxBodyBytes <= 0 {
		id.MaxBodyBytes = 1 << 20
	}
	if id.MaxResponseBytes <= 0 {
		id.MaxResponseBytes = 64 << 10
	}
	if id.ReuseStatus == 0 {
		id.ReuseStatus = http.StatusConflict
	}
	p := &Proxy{opts: opts, log: opts.Logger, drop: make(map[string]bool), metrics: opts.Metrics, probes: newProber()}
	p.budget = budget.New(opts.MaxBufferedBytes, opts.MaxBufferedBytesPerClient)
	for _, s := range id.ReleaseStatuses {
		if s < 100 || s >= len(p.releasable) {
			return nil, fmt.Errorf("proxy: release status %d out of range", s)
		}
		p.releasable[s] = true
	}
	for _, h := range id.DropHeaders {
		p.drop[http.CanonicalHeaderKey(h)] = true
	}
	p.notices = id.Notices
	if p.notices == nil {
		p.notices = new(keystore.Hub)
	}
	def, err := identity.New(identity.Options{Headers: id.IdentityHeaders})
	if err != nil {
		return nil, fmt.Errorf("proxy: identity headers: %w", err)
	}
	p.defIdentity = def
	p.renewals.init(opts.Store, opts.Logger, opts.Now)
	p.upstream = p.newUpstream()
	return p, nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.handler.ServeHTTP(w, r)
}

// Close waits for the lease renewals of requests still running and the
// background completion retries to stop. It does not close the Store, the
// limiters or the session queue.
func (p *Proxy) Close() error { return p.Shutdown(context.Background()) }

// Shutdown is [Proxy.Close] within ctx (DESIGN.md, Bounds: shutdown ends
// within --grace): when ctx ends first, the background completion retries
// stop at once, and the answers they had not stored, with the claims of
// requests still running, are counted in one error log line (their keys
// are taken over after their lease). It returns nil either way.
func (p *Proxy) Shutdown(ctx context.Context) error {
	tasks, claims := p.renewals.close(ctx)
	p.probes.close()
	if n := p.extendKept(); n > 0 {
		p.log.Warn("shutdown deadline passed with upstream calls kept past their timeout; their leases were extended to the end of their late wait",
			"kept_calls", n)
	}
	if tasks > 0 || claims > 0 {
		p.log.Error("shutdown deadline passed: answers not stored and requests still running were abandoned; their keys are taken over after their lease",
			"unstored_answers", tasks, "running_claims", claims)
	}
	return nil
}
