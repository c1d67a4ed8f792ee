package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/internal/clientaddr"
	"github.com/idemgate/idemgate/keystore"
)

// Proxy is the idemgate pipeline. It is an http.Handler, safe for
// concurrent use. Build it with [New] and give it its policy with
// [Proxy.Apply] before it serves.
type Proxy struct {
	handler  http.Handler // the whole chain (chain.go)
	log      *slog.Logger
	deps     Deps
	cur      atomic.Pointer[snapshot] // the policy requests start on (Apply)
	upstream http.Handler             // step 7, shared by every snapshot
	metrics  *Metrics
	budget   *budget.Budget // max_buffered_bytes: keyed bodies held (body.go)
	renewals renewer
	waiters  waiters
	late     lateCalls   // upstream calls kept past their timeout (late.go)
	workers  keptWorkers // the goroutines kept calls run on (keptworkers.go)
	// wakeTimers pools the timers kept calls' handlers wait on (late.go).
	wakeTimers sync.Pool
	probes     *prober // reconcile probes (reconcile.go)
}

// absolute reports whether u can be an upstream: an absolute URL.
func absolute(u *url.URL) bool { return u != nil && u.Scheme != "" && u.Host != "" }

// New returns a proxy on the long-lived dependencies d. It serves once
// [Proxy.Apply] gave it a policy; until then it answers 503.
func New(d Deps) *Proxy {
	if d.Transport == nil {
		d.Transport = NewTransport()
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.ClientAddr == nil {
		d.ClientAddr = clientaddr.Resolve
	}
	if d.Notices == nil {
		d.Notices = new(keystore.Hub)
	}
	p := &Proxy{deps: d, log: d.Logger, metrics: d.Metrics, budget: budget.New(0, 0), probes: newProber()}
	p.renewals.init(d.Store, d.Logger, d.Now)
	// At most 256 idle workers; they exit 100-200ms after the last call
	// handed to one.
	p.workers.init(p.runKept, 256, 100*time.Millisecond)
	p.upstream = p.newUpstream()
	// The order is DESIGN.md's and is authoritative; chain_test.go pins it.
	p.handler = chain(http.HandlerFunc(p.serveSnapshot),
		p.begin,         // the exchange: the snapshot, request ID, client address
		p.tracing(),     // the server span (nil without a tracer)
		p.countInFlight, // in-flight gauge (drops after the request is logged)
		p.logAccess,     // one access-log line and the request metrics
		p.recoverPanic,  // a panic answers 500 (or aborts a started answer)
	)
	return p
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.cur.Load() == nil {
		http.Error(w, "idemgate: no policy applied", http.StatusServiceUnavailable)
		return
	}
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
	p.workers.retire()
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
