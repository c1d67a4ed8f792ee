package proxy

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// Late answers (DESIGN.md, Unknown outcomes, 1): when a keyed write's
// timeout passes, the client gets 504 upstream_timeout at once, but the
// upstream call is not cancelled. It runs on, detached from the client, for
// up to the route's late_answer_wait more, and whatever it carries is
// recorded like any answer, so that a retry replays it instead of running
// the write a second time. While it runs, the request keeps everything it
// held: its claim (renewed), its session turn and lock, and its body's hold
// on max_buffered_bytes. The stages that would give those back when the
// handler returns hand their cleanups to the call instead
// ([exchange.after]); the call runs them, and writes the request's one
// access-log line (outcome late when the answer was recorded), when it
// ends.

// lateCall is the upstream call of a keyed write with a late wait. The
// call runs on a goroutine of its own (a pooled worker: keptworkers.go),
// which writes to the client through a [latchWriter] until the handler
// detaches it.
type lateCall struct {
	// mu protects the fields below and orders the call's goroutine
	// against the handler's detach: what decides the outcome (the record's
	// result, the problem writer's outcome and code) is written only under
	// it while both run.
	mu       sync.Mutex
	started  bool     // the answer's head went to the client
	finished bool     // the call's goroutine is over
	detached bool     // the client got 504; the call runs on without it
	ended    bool     // the cleanups ran (or run now): after runs f at once
	queue    []func() // cleanups handed over by the stages, in order
	cancel   context.CancelCauseFunc
	deadline time.Time // the end of the late wait
	// expire cancels the call at its deadline, with the cause
	// context.DeadlineExceeded. It is armed only when the timeout passed
	// with the call still running (detached, or its answer streaming): the
	// usual call, answered within its timeout, makes no second timer
	// (issue 31).
	expire *time.Timer
	// wake gets a token (buffered, never blocking the sender) when the
	// call's goroutine is over and when the timeout passed: the handler
	// waits on it, then tells which from finished.
	wake     chan struct{}
	panicked any // the call's panic, for the handler to raise again
	// lw, rp, out and ex are what the call's goroutine runs: one object
	// with the call instead of several (issue 31).
	lw  latchWriter
	rp  http.Handler
	out *http.Request
	ex  *exchange
	// key, token and lease are the claim's, for the shutdown (see
	// [Proxy.Shutdown]).
	key   keystore.Key
	token uint64
	lease *leaseHandle
	// route and requestID name the call for the shutdown's unknown
	// outcome; hold is its route's unknown_outcome: hold.
	route, requestID string
	hold             bool
}

// end marks the call's cleanups due and runs those handed over so far, in
// the order they were handed over.
func (lc *lateCall) end() {
	lc.mu.Lock()
	lc.ended = true
	q := lc.queue
	lc.queue = nil
	lc.mu.Unlock()
	for _, f := range q {
		f()
	}
}

// after runs f now, or, when the request's upstream call was detached and
// still runs, when the call ends: the stages use it for what they give
// back when the request is over (its session turn, its body's memory, the
// claim's gauge, the access-log line), so that a kept call keeps them.
func (ex *exchange) after(f func()) {
	if ex.kept() {
		lc := ex.kw.kept
		lc.mu.Lock()
		if !lc.ended {
			lc.queue = append(lc.queue, f)
			lc.mu.Unlock()
			return
		}
		lc.mu.Unlock()
	}
	f()
}

// kept reports whether the request's upstream call was detached (and may
// still run): only then does [exchange.after] hold a cleanup back. The
// stages test it first so that the usual request, never kept, makes no
// closure for after (issue 31: an allocation per cleanup).
func (ex *exchange) kept() bool { return ex != nil && ex.kw != nil && ex.kw.kept != nil }

// latchWriter is what ReverseProxy writes a kept call's answer to: the
// client's writer until the call is detached, nothing after. The answer's
// head is collected in a header of its own until it is written, so that a
// detach that answers 504 never shares a header map with the call.
type latchWriter struct {
	lc    *lateCall
	w     http.ResponseWriter // the client's
	h     http.Header
	wrote bool // the head was written (the call's goroutine only)
}

func (lw *latchWriter) Header() http.Header {
	if lw.wrote {
		return lw.w.Header() // trailers
	}
	return lw.h
}

func (lw *latchWriter) WriteHeader(code int) {
	lc := lw.lc
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.detached || lw.wrote {
		return
	}
	dst := lw.w.Header()
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		// An informational answer: its header goes with it, and only
		// with it (ReverseProxy clears lw.h after it).
		prior := make(map[string][]string, len(lw.h))
		for k, v := range lw.h {
			prior[k] = dst[k]
			dst[k] = v
		}
		lw.w.WriteHeader(code)
		for k, v := range prior {
			if v == nil {
				delete(dst, k)
			} else {
				dst[k] = v
			}
		}
		return
	}
	for k, v := range lw.h {
		dst[k] = v
	}
	lw.wrote, lc.started = true, true
	lw.w.WriteHeader(code)
}

func (lw *latchWriter) Write(p []byte) (int, error) {
	if !lw.wrote {
		lw.WriteHeader(http.StatusOK)
	}
	lc := lw.lc
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.detached {
		return len(p), nil
	}
	return lw.w.Write(p)
}

// FlushError implements the interface http.ResponseController prefers.
func (lw *latchWriter) FlushError() error {
	lc := lw.lc
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.detached {
		return nil
	}
	return http.NewResponseController(lw.w).Flush()
}

// lateCalls counts the kept calls of a process (late_answer_max) and lists
// them for the shutdown.
type lateCalls struct {
	n     atomic.Int64
	mu    sync.Mutex // protects calls
	calls map[*lateCall]struct{}
}

// keep admits lc as a kept call unless max are kept already.
func (lcs *lateCalls) keep(lc *lateCall, max int) bool {
	if lcs.n.Add(1) > int64(max) {
		lcs.n.Add(-1)
		return false
	}
	lcs.mu.Lock()
	if lcs.calls == nil {
		lcs.calls = make(map[*lateCall]struct{})
	}
	lcs.calls[lc] = struct{}{}
	lcs.mu.Unlock()
	return true
}

func (lcs *lateCalls) done(lc *lateCall) {
	lcs.mu.Lock()
	delete(lcs.calls, lc)
	lcs.mu.Unlock()
	lcs.n.Add(-1)
}

// list returns the calls kept now.
func (lcs *lateCalls) list() []*lateCall {
	lcs.mu.Lock()
	defer lcs.mu.Unlock()
	out := make([]*lateCall, 0, len(lcs.calls))
	for lc := range lcs.calls {
		out = append(out, lc)
	}
	return out
}

// serveKept runs a keyed write's upstream call with a late wait (see the
// top of this file). The call runs on a goroutine of its own (a pooled
// worker); the handler waits for it until the route's timeout, counted
// from the request's arrival.
// Then, unless the answer already started to go out (it streams on, within
// the late wait) or the process keeps late_answer_max calls already (the
// call is cancelled as before, and counted), the client gets 504 at once
// and the handler returns, leaving the call to run on. Either way the
// call is cancelled at the end of its late wait (lateCall.expire), with
// the cause context.DeadlineExceeded.
func (p *Proxy) serveKept(rp http.Handler, w http.ResponseWriter, r *http.Request, ex *exchange, end time.Time, wait time.Duration) {
	call, kw := &ex.call, ex.kw
	lc := &lateCall{deadline: end.Add(wait), key: kw.sk, token: kw.claim.Token, lease: kw.lease,
		route: ex.route.Name, requestID: ex.id, hold: ex.route.hold,
		wake: make(chan struct{}, 1), rp: rp, ex: ex}
	// No deadline of its own: the late wait's end cancels the call with
	// the cause a deadline has (lc.expire), and only a call that outlives
	// its timeout arms it.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
	lc.cancel = cancel
	call.late = lc // from now on the record runs under lc's lock
	ex.swallow = true
	lc.out = r.WithContext(p.traceWrites(ctx, call))
	if call.sent == notSent {
		call.sent = maybeSent
	}
	lc.lw = latchWriter{lc: lc, w: w, h: make(http.Header)}
	p.workers.start(lc)
	timer := p.startWakeTimer(time.Until(end), lc)
	<-lc.wake
	lc.mu.Lock()
	finished := lc.finished
	lc.mu.Unlock()
	if !finished {
		// The timeout passed.
		if p.detach(w, r, ex, lc) {
			return
		}
		<-lc.wake
	}
	p.releaseWakeTimer(timer)
	if v := lc.panicked; v != nil {
		panic(v)
	}
}

// runKept is the goroutine of a kept call: it runs the upstream call and,
// when the call was detached, records it and gives back what the request
// held.
func (p *Proxy) runKept(lc *lateCall) {
	defer func() {
		v := recover()
		lc.cancel(nil)
		lc.mu.Lock()
		lc.finished = true
		if lc.expire != nil {
			lc.expire.Stop()
		}
		detached := lc.detached
		if !detached {
			lc.panicked = v
		}
		lc.mu.Unlock()
		if !detached {
			lc.wakeUp()
			return
		}
		ex := lc.ex
		if v != nil && v != http.ErrAbortHandler {
			p.log.Error("panic in a kept upstream call", "panic", v, logRequestID, ex.id)
		}
		// The call is over: record what it carried, then give back what
		// the request held.
		ex.kw.record()
		p.late.done(lc)
		p.metrics.lateHeld(-1)
		lc.end()
	}()
	lc.rp.ServeHTTP(&lc.lw, lc.out)
}

// wakeTimer is what a kept call's handler waits on for the timeout: a
// timer that wakes it (lateCall.wakeUp). The timers are pooled with their
// callback, per proxy (a timer serves only the clock it was made on: a
// test's synctest bubble, where a proxy is made), as the pass-throughs'
// headerTimer is; one goes back to the pool only when it was stopped
// before it fired, so its callback never runs for a later call (issue 31:
// a timer, a channel and a select fewer per keyed write).
type wakeTimer struct {
	t  *time.Timer
	lc *lateCall // set before the timer is armed
}

// startWakeTimer wakes lc's handler after d (its timeout), unless
// released first.
func (p *Proxy) startWakeTimer(d time.Duration, lc *lateCall) *wakeTimer {
	if wt, ok := p.wakeTimers.Get().(*wakeTimer); ok {
		wt.lc = lc
		wt.t.Reset(d) // orders the write of lc before the callback
		return wt
	}
	wt := &wakeTimer{lc: lc}
	wt.t = time.AfterFunc(d, wt.fire)
	return wt
}

func (wt *wakeTimer) fire() { wt.lc.wakeUp() }

// releaseWakeTimer stops wt and pools it, unless it fired.
func (p *Proxy) releaseWakeTimer(wt *wakeTimer) {
	if wt.t.Stop() {
		wt.lc = nil
		p.wakeTimers.Put(wt)
	}
}

// wakeUp hands the handler waiting in serveKept a token, unless one waits
// already.
func (lc *lateCall) wakeUp() {
	select {
	case lc.wake <- struct{}{}:
	default:
	}
}

// outlive arms the end of the late wait for a call that runs past its
// timeout. lc.mu is held and the call is not finished.
func (lc *lateCall) outlive() {
	lc.expire = time.AfterFunc(time.Until(lc.deadline), func() { lc.cancel(context.DeadlineExceeded) })
}

// detach answers the client of a kept call whose timeout passed with 504
// and leaves the call running, and reports whether it did. It does not
// when the call is over or its answer already started to go out, or when
// late_answer_max calls are kept already: then the call is cancelled, as
// without a late wait, and counted.
func (p *Proxy) detach(w http.ResponseWriter, r *http.Request, ex *exchange, lc *lateCall) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.finished {
		return false
	}
	if lc.started {
		lc.outlive() // its answer streams on, within the late wait
		return false
	}
	if !p.late.keep(lc, ex.snap.idem.LateAnswerMax) {
		p.metrics.lateDropped(ex.route.Name)
		p.log.Warn("late_answer_max calls are kept already; a timed-out write was cancelled", logRequestID, ex.id, logRoute, ex.route.Name)
		lc.cancel(context.DeadlineExceeded)
		return false
	}
	p.metrics.lateHeld(1)
	lc.outlive()
	lc.detached = true
	ex.kw.kept = lc
	writeProblem(w, r, problemUpstreamTimeout)
	return true
}

// extendKept runs at the shutdown's deadline for the calls still kept: the
// claim of each stops being renewed; on a hold route it is marked unknown
// (cause shutdown), and on a takeover route its lease is extended, by one
// fenced write, to the end of its late wait, so that no retry takes the
// key over while the write may still run upstream. It returns how many
// were marked or extended.
func (p *Proxy) extendKept() int {
	n := 0
	for _, lc := range p.late.list() {
		if lc.lease == nil {
			continue
		}
		lc.lease.stop()
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		if lc.hold {
			if p.markUnknown(ctx, lc.route, lc.requestID, lc.key, lc.token, keystore.CauseShutdown) {
				n++
			}
			cancel()
			continue
		}
		left := time.Until(lc.deadline)
		if left <= 0 {
			cancel()
			continue
		}
		_, err := p.deps.Store.Renew(ctx, lc.key, lc.token, left)
		cancel()
		if err != nil {
			p.log.Warn("extending the lease of a kept call at shutdown failed", "error", err)
			continue
		}
		n++
	}
	return n
}
