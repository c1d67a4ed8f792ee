package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/netip"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/internal/gql"
	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/internal/problem"
)

// exchange is the state of one request as it moves through the chain. The
// outermost stage allocates it and puts it in the request's context; inner
// stages fill it in, and the access log reads it at the end. It also wraps
// the client's ResponseWriter to see the status and bytes written. What
// only a keyed write under a claim needs is its [keyedWrite] (kw).
type exchange struct {
	http.ResponseWriter

	start      time.Time
	id         string     // request ID
	client     netip.Addr // client address (after trusted proxies)
	clientText string     // client.String(), once asked (clientString)

	ctx  exchangeCtx // the request's context from the outermost stage on (withExchange)
	snap *snapshot   // the policy this request runs on, from start to end (Proxy.Apply)

	route *route         // nil: no route matched
	match pathtmpl.Match // the route's match: normalized path parameters

	// What decides the outcome ([exchange.outcome]): the problem
	// writer's (problem.go), or how the request went on.
	problem  string // the outcome of the problem written; "" for none
	code     string // problem code, "" when the upstream answered
	observed string // observe mode forwarded a keyed write unclaimed: enforce mode's outcome
	// (via and aborted, below)

	// The key check's findings (keycheck.go, graphql.go), for the claim.
	key   string           // the key check passed this key
	body  []byte           // the body, read whole (body.go)
	bodyR bytes.Reader     // the body as sent upstream (rewrite)
	fp    fingerprintInput // the body as its fingerprint reads it
	held  *budget.Body     // the body's hold on max_buffered_bytes: charge derived buffers to it
	gql   *gql.Request     // GraphQL routes: the parsed request of a keyed write

	// kw is the keyed write under a claim (keyedwrite.go), made by the
	// claim stage in write; nil for every other request.
	kw     *keyedWrite
	write  keyedWrite
	call   upstreamCall  // the upstream stage's state, once it runs
	span   trace.Span    // the server span; nil without tracing (tracing.go)
	waited time.Duration // how long it waited for the original (wait.go)

	ident      identity.Result // the client's identity, once resolved (identity.go)
	identDone  bool
	tenantOK   bool   // tenant is the Host's (tenantOf)
	tenantDone bool   // tenant and tenantOK were looked up
	tenant     string // the Host's tenant, once asked

	status      int   // status written to the client
	written     int64 // body bytes written to the client
	wroteHeader bool
	clientGone  bool // a write to the client failed
	swallow     bool // keep accepting writes after the client is gone
	// One-byte fields beside those above, in what would be padding
	// (TestExchangeSizeClass).
	pastEdge  bool  // the request passed the edge limit (for metrics)
	via       via   // how a request that is no keyed write went on (the outcome's)
	aborted   bool  // the answer was cut (http.ErrAbortHandler; the outcome's)
	clientErr error // the first failed write's error

	// ids holds the request ID's header values, in the inbound request
	// and in the answer (begin), so that they take no allocation of their
	// own (issue 31). Each header's slice is capped at its own element.
	ids [2]string
}

// via says how a request that is not a keyed write under a claim went on,
// when the proxy did not answer it with a problem.
type via uint8

const (
	viaPass   via = iota // no keyed route, or a pass-through the proxy did not look at
	viaNoKey             // a keyed route's request without a key
	viaRead              // a GraphQL route's query or subscription
	viaReplay            // answered with its stored answer
	viaHungUp            // the client hung up on the upstream call
)

// outcome is the request's outcome (DESIGN.md's list), as the access log,
// the metrics and the server span show it. Besides the problem writer's
// (problem.go), which refuses a request or answers for the upstream, it is
// decided here alone: a keyed write's by its record ([keyedWrite.outcome]),
// any other request's by how it went on.
func (ex *exchange) outcome() string {
	if ex.kw != nil {
		return ex.kw.outcome(ex.problem)
	}
	switch {
	case ex.problem != "":
		return ex.problem
	case ex.via == viaHungUp:
		return OutcomePassthrough
	case ex.observed != "":
		return wouldOutcome(ex.observed)
	case ex.via == viaReplay:
		return OutcomeReplayed
	case ex.via == viaNoKey:
		return OutcomeUnprotected
	case ex.via == viaPass && ex.aborted:
		return OutcomeUpstreamError
	}
	return OutcomePassthrough
}

// sendState says how far a request got towards the upstream: it decides
// whether a claimed key may be released (record.go).
type sendState uint8

const (
	notSent   sendState = iota // nothing reached the upstream: release
	maybeSent                  // the upstream may have run it: keep the claim
	answered                   // the upstream answered with a status
)

type exchangeKey struct{}

func exchangeOf(r *http.Request) *exchange {
	ex, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return ex
}

// withExchange returns r with ex in its context. The context lives in ex
// (what context.WithValue would allocate, issue 31).
func withExchange(r *http.Request, ex *exchange) *http.Request {
	ex.ctx = exchangeCtx{Context: r.Context(), ex: ex}
	return r.WithContext(&ex.ctx)
}

// exchangeCtx is context.WithValue(parent, exchangeKey{}, ex) kept inside
// ex: a request's context carrying its exchange.
type exchangeCtx struct {
	context.Context
	ex *exchange
}

func (c *exchangeCtx) Value(key any) any {
	if key == (exchangeKey{}) {
		return c.ex
	}
	return c.Context.Value(key)
}

// begin is the outermost stage: it starts the request's exchange, takes or
// makes its request ID and decides its client address (the TCP peer, or the
// X-Forwarded-For entry from a trusted proxy).
func (p *Proxy) begin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The request runs on the stages current now, from here to its
		// end: the request ID header is theirs.
		ex := &exchange{ResponseWriter: w, start: time.Now(), snap: p.cur.Load()}
		h := ex.snap.requestID
		ex.id = problem.RequestID(headerValue(r.Header, h))
		// Header.Set for both, their values in the exchange.
		ex.ids[0], ex.ids[1] = ex.id, ex.id
		r.Header[h] = ex.ids[0:1:1]
		w.Header()[h] = ex.ids[1:2:2]
		ex.client = p.deps.ClientAddr(remoteAddr(r), r.Header["X-Forwarded-For"], ex.snap.src.TrustedProxies)
		next.ServeHTTP(ex, withExchange(r, ex))
	})
}

// headerValue is h.Get(key) for a key in canonical form (a constant, or a
// name the policy made canonical), without Get's canonicalization of key
// on every call (issue 31).
func headerValue(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// clientString returns ex.client.String(), made once: the access log and
// X-Forwarded-For both want it (issue 31).
func (ex *exchange) clientString() string {
	if ex.clientText == "" {
		ex.clientText = ex.client.String()
	}
	return ex.clientText
}

// clientAddr returns the client address the proxy decided for r; the zero
// Addr when r did not pass the outermost stage.
func clientAddr(r *http.Request) netip.Addr {
	if ex := exchangeOf(r); ex != nil {
		return ex.client
	}
	return netip.Addr{}
}

func (ex *exchange) WriteHeader(code int) {
	if ex.wroteHeader {
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		ex.ResponseWriter.WriteHeader(code)
		return
	}
	ex.wroteHeader = true
	ex.status = code
	ex.ResponseWriter.WriteHeader(code)
}

func (ex *exchange) Write(p []byte) (int, error) {
	if !ex.wroteHeader {
		ex.WriteHeader(http.StatusOK)
	}
	if ex.clientGone {
		if ex.swallow {
			return len(p), nil
		}
		return 0, ex.clientErr
	}
	n, err := ex.ResponseWriter.Write(p)
	ex.written += int64(n)
	if err != nil {
		ex.clientGone, ex.clientErr = true, err
		if ex.swallow {
			// A keyed write runs to its end whatever the client does, so
			// that its whole answer is stored for the retry (DESIGN.md
			// step 7). Pretend the bytes went out.
			return len(p), nil
		}
	}
	return n, err
}

// Flush implements http.Flusher for streaming answers.
func (ex *exchange) Flush() {
	if ex.clientGone {
		return
	}
	if err := http.NewResponseController(ex.ResponseWriter).Flush(); err != nil && ex.swallow {
		ex.clientGone = true
	}
}

// FlushError implements the interface http.ResponseController prefers.
func (ex *exchange) FlushError() error {
	if ex.clientGone {
		if ex.swallow {
			return nil
		}
		return http.ErrAbortHandler
	}
	err := http.NewResponseController(ex.ResponseWriter).Flush()
	if err != nil {
		ex.clientGone = true
		if ex.swallow {
			return nil
		}
	}
	return err
}

// Unwrap lets http.ResponseController reach the connection (deadlines,
// hijacking for upgrades).
func (ex *exchange) Unwrap() http.ResponseWriter { return ex.ResponseWriter }
