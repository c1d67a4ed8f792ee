package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/internal/gql"
	"github.com/idemgate/idemgate/keystore"
)

// storeTimeout bounds each store call made for a request.
const storeTimeout = 5 * time.Second

// record is DESIGN.md step 8 for kw (see [keyedWrite.record], which runs
// it once): store the answer, release the key, or keep the claim until its
// lease ends when the outcome is unknown.
func (p *Proxy) record(kw *keyedWrite) {
	ex, sk, claim := kw.ex, kw.sk, kw.claim
	token := claim.Token
	ctx, cancel := context.WithTimeout(context.WithoutCancel(kw.r.Context()), storeTimeout)
	defer cancel()
	ctx, span := p.startSpan(ctx, spanStoreWrite)
	defer endSpan(span, nil)
	var resp *keystore.Response
	if ex.call.sent == answered {
		resp = kw.capture.response()
	}
	switch {
	case ex.call.sent == notSent:
		// Nothing reached the upstream (refused, or turned away before it
		// was forwarded): the retry may run.
		kw.result = recordUnsent
		p.releaseKey(ctx, ex, sk, token)
	case resp == nil:
		// Timeout or broken connection: the upstream may have run it. The
		// claim stays until its lease ends; a retry gets 409, then takes
		// over. On a hold route it is marked unknown now (unknown.go).
		kw.result = recordUnknown
		if ex.route.hold {
			cause := ex.call.failure
			if cause == 0 {
				cause = keystore.CauseBroken // the answer broke mid-body
			}
			p.markUnknown(ctx, ex.route.Name, ex.id, sk, token, cause)
		}
	case ex.gql != nil && gql.ReleaseOnAnswer(*ex.gql, resp.Status, ex.route.releasableStatus, resp.Body),
		ex.gql == nil && ex.route.releasableStatus(resp.Status):
		kw.result = recordReleased
		p.releaseKey(ctx, ex, sk, token)
	default:
		kw.result = recordStored
		p.complete(ctx, ex, sk, claim, resp)
	}
}

// releaseKey deletes the claim (the store's Release), so that a retry runs.
func (p *Proxy) releaseKey(ctx context.Context, ex *exchange, sk keystore.Key, token uint64) {
	ctx, n := p.foldNotice(ctx, ex.route.wait)
	if err := p.deps.Store.Release(ctx, sk, token); err != nil && !errors.Is(err, keystore.ErrLeaseLost) {
		p.log.Error("releasing key failed", "error", err, logRequestID, ex.id)
		return
	}
	if ex.route.wait {
		p.notifyAfter(sk, n) // wait.go: only a waiting route has waiters
	}
}

// sharedNotices is a shared [keystore.Notices] whose notice the store can
// publish with the write that settles a record (redisstore.Notices with
// redisstore.Store): see [keystore.FoldedNotice].
type sharedNotices interface {
	Channel() string
	Notify(keystore.Key) // this process's watchers only
}

// foldNotice returns ctx asking the store to publish the record's
// completion notice with its write, and that notice, on a waiting route
// with shared notices (issue 31: one Redis round trip less); otherwise ctx
// and nil.
func (p *Proxy) foldNotice(ctx context.Context, wait bool) (context.Context, *keystore.FoldedNotice) {
	sn, ok := p.deps.Notices.(sharedNotices)
	if !wait || !ok {
		return ctx, nil
	}
	n := &keystore.FoldedNotice{Channel: sn.Channel()}
	return keystore.WithFoldedNotice(ctx, n), n
}

// notifyAfter tells sk's waiters that the store call made with n's
// context settled the record: only this process's when the store
// published the notice with its write, every process's otherwise.
func (p *Proxy) notifyAfter(sk keystore.Key, n *keystore.FoldedNotice) {
	if n != nil && n.Published {
		p.deps.Notices.(sharedNotices).Notify(sk)
		return
	}
	p.notify(sk)
}

// complete stores resp. The first attempt is made at once, before the
// answer's last bytes reach the client; if the store fails, the retries
// (within half the lease, by the proxy's clock, and never past the
// shutdown's deadline: see [Proxy.Shutdown]) run in the background, so
// that a slow or broken store never holds the client's connection.
func (p *Proxy) complete(ctx context.Context, ex *exchange, sk keystore.Key, claim keystore.Claim, resp *keystore.Response) {
	wait := ex.route != nil && ex.route.wait
	nctx, n := p.foldNotice(ctx, wait)
	err := p.completeClaim(nctx, ex.id, sk, claim, resp)
	if p.completed(sk, wait, n, ex.id, err, 1) {
		return
	}
	p.retryComplete(ex, sk, claim, resp, wait, err)
}

// retryComplete retries a failed completion in the background (see
// [Proxy.complete]). Apart so that complete's arguments, which the retries'
// closure captures, are not moved to the heap on every completion.
func (p *Proxy) retryComplete(ex *exchange, sk keystore.Key, claim keystore.Claim, resp *keystore.Response, wait bool, err error) {
	id, now, lease := ex.id, p.deps.Now, ex.snap.idem.Lease
	p.renewals.background(func(stop context.Context) {
		deadline := now().Add(lease / 2)
		backoff := 50 * time.Millisecond
		for attempt := 2; now().Add(backoff).Before(deadline); attempt++ {
			select {
			case <-stop.Done(): // shutdown's deadline: counted and logged by Proxy.Shutdown
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			ctx, cancel := context.WithTimeout(stop, storeTimeout)
			ctx, n := p.foldNotice(ctx, wait)
			err = p.completeClaim(ctx, id, sk, claim, resp)
			cancel()
			if p.completed(sk, wait, n, id, err, attempt) {
				return
			}
		}
		p.log.Error("storing answer failed; the key will be taken over after its lease", "error", err, logRequestID, id)
	})
}

// completeClaim makes one attempt to store resp as claim's answer, by claim
// id (DESIGN.md step 8: a record that vanished is created again, an answer
// in hand is never thrown away).
func (p *Proxy) completeClaim(ctx context.Context, requestID string, sk keystore.Key, claim keystore.Claim, resp *keystore.Response) error {
	how, err := p.deps.Store.CompleteClaim(ctx, sk, claim, resp)
	switch {
	case err != nil:
	case how == keystore.Recreated:
		p.log.Warn("the record of a running request vanished from the store; its answer was stored again", logRequestID, requestID)
	case how == keystore.Expired:
		p.log.Warn("the record of a running request vanished and its retention had ended; the answer was not stored", logRequestID, requestID)
	}
	return err
}

// completed reports whether a Complete attempt settled the record: stored,
// or no longer ours to store. n is the attempt's folded notice (nil: none).
func (p *Proxy) completed(sk keystore.Key, wait bool, n *keystore.FoldedNotice, requestID string, err error, attempt int) bool {
	switch {
	case err == nil:
		if wait {
			p.notifyAfter(sk, n) // wait.go: only a waiting route has waiters
		}
		if attempt > 1 {
			p.log.Info("answer stored after a retry", "attempts", attempt, logRequestID, requestID)
		}
		return true
	case errors.Is(err, keystore.ErrLeaseLost):
		// Taken over (or repaired by an operator) while we ran: the record
		// belongs to someone else now; our client still got our answer.
		// (CompleteClaim never returns ErrNotFound.)
		p.log.Warn("late completion rejected", "error", err, logRequestID, requestID)
		return true
	}
	p.log.Warn("storing answer failed; retrying", "error", err, "attempt", attempt, logRequestID, requestID)
	return false
}

// replay answers with a stored response (DESIGN.md, Replays).
func (p *Proxy) replay(w http.ResponseWriter, r *http.Request, resp *keystore.Response) {
	ex := exchangeOf(r)
	ex.via = viaReplay
	linkOrigin(ex, resp.Header)
	h := w.Header()
	for k, v := range resp.Header {
		if k == ex.snap.requestID || k == traceOriginHeader {
			continue
		}
		h[k] = v
	}
	if rh := ex.route.replayHdr; rh != "" {
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
