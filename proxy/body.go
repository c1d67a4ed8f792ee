package proxy

import (
	"errors"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/limiter"
)

// free gives held back to the budget now, or when a kept call ends
// ([exchange.after]).
func (ex *exchange) free(held *budget.Body) {
	if !ex.kept() {
		held.Free()
		return
	}
	ex.after(held.Free)
}

// readBody reads a keyed request's body whole (DESIGN.md, Bounds), within
// max_body_bytes, the max_buffered_bytes budget and the client's share of
// it (charged as the bytes arrive, never from Content-Length), before
// request_body_timeout from the end of its headers, and puts it back for the
// upstream. The hold on the budget is left in the exchange (ex.held), so
// that the buffers derived from the body (its decoded form, its canonical
// JSON) are charged to it too. The caller gives every byte back with
// [exchange.free] when the request is done.
//
// On error, observe mode (observe) forwards the request as it came: what
// was read is put back in front of the rest (or of the same failure).
// Enforce mode answers the problem and closes the connection after it,
// reading nothing more: the rest of the body was not read, and net/http
// would otherwise read it first, from a client that may never send it.
func (p *Proxy) readBody(w http.ResponseWriter, r *http.Request, observe bool) (body []byte, held *budget.Body, prob *proxyProblem) {
	ex := exchangeOf(r)
	opt := budget.ReadOptions{Limit: ex.route.maxBody, Writer: w, DropOnError: !observe}
	if d := ex.snap.src.RequestBodyTimeout; d > 0 {
		// The exchange starts as the server hands the request over, right
		// after its headers.
		opt.Deadline = ex.start.Add(d)
	}
	held, err := p.budget.ReadBody(limiter.Bucket(ex.client), r, &opt)
	if err == nil {
		ex.held = held
		return held.Bytes(), held, nil
	}
	if !observe || errors.Is(err, budget.ErrTimeout) {
		// Read nothing more from this client: net/http's Body.Close would
		// read (and wait for) up to 256 KiB of what is left.
		_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	}
	if !observe {
		w.Header().Set("Connection", "close")
	}
	switch {
	case errors.Is(err, budget.ErrTooLarge):
		return nil, nil, &problemRequestTooLarge
	case errors.Is(err, budget.ErrOverloaded):
		return nil, nil, &problemOverloaded
	case errors.Is(err, budget.ErrTimeout):
		return nil, nil, &problemRequestTimeout
	}
	// The client went away or sent a broken body: nothing was claimed.
	return nil, nil, &problemBodyInvalid
}
