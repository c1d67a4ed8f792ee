package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/idemgate/idemgate/keystore"
)

// Unknown outcomes (DESIGN.md, Unknown outcomes, 2): on a route with
// unknown_outcome: hold, a keyed write's claim gets a fenced sent mark just
// before its request is forwarded. When its outcome is then unknown — the
// connection broke after the request was sent, the late wait ended without
// an answer, or the process stopped while the call was kept — its holder
// marks the record unknown at once; a lapsed claim with the sent mark (its
// holder died) is marked unknown by the retry or waiter that finds it (the
// store does it, fenced, inside that Reserve). Every retry of an unknown
// record gets 409 idempotency_outcome_unknown and nothing runs until it is
// resolved (by the holder's own late answer, or by an operator through the
// admin API). A lapsed claim without the sent mark never reached the
// upstream and is taken over as on takeover routes.

// markSent writes the sent mark of a keyed write on a hold route, with what
// the admin API shows of it (the store seals it like a body). It reports
// whether the request may be forwarded: a request whose mark could not be
// written is answered 503 idempotency_unavailable and never sent (its
// claim is released by the record, since nothing was sent), because a
// sent request without the mark could be taken over, and run twice, when
// its holder dies.
func (p *Proxy) markSent(w http.ResponseWriter, r *http.Request, ex *exchange) bool {
	kw := ex.kw
	if kw == nil || !ex.route.hold {
		return true
	}
	us, ok := p.deps.Store.(keystore.UnknownStore)
	if !ok {
		return true // validate and New refuse hold without such a store
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), storeTimeout)
	defer cancel()
	info := keystore.UnknownInfo(r.Method, r.URL.RequestURI(), ex.key, ex.id)
	if ex.route.probe != nil {
		p.probeInfo(info, r, ex)
	}
	if err := us.MarkSent(ctx, kw.sk, kw.claim.Token, info); err != nil {
		p.log.Error("writing the sent mark failed; the request was not forwarded", "error", err, logRequestID, ex.id, logRoute, ex.route.Name)
		writeProblem(w, r, problemUnavailable)
		return false
	}
	return true
}

// markUnknown marks the claim of a keyed write on a hold route unknown,
// with cause, and reports whether it did.
func (p *Proxy) markUnknown(ctx context.Context, route, requestID string, sk keystore.Key, token uint64, cause keystore.Cause) bool {
	us, ok := p.deps.Store.(keystore.UnknownStore)
	if !ok {
		return false
	}
	if err := us.MarkUnknown(ctx, sk, token, cause); err != nil {
		// Lost: taken over, resolved or completed meanwhile; a store
		// error: the claim lapses with its sent mark, and the first retry
		// marks it unknown (cause lapsed).
		p.log.Warn("marking an unknown outcome failed", "error", err, logRequestID, requestID, logRoute, route, "cause", cause.String())
		return false
	}
	p.unknownOutcome(route, sk, requestID, cause)
	if cause != keystore.CauseShutdown {
		p.probeSoon(route, sk) // the first probe, at the moment of unknown (reconcile.go)
	}
	return true
}

// unknownOutcome counts and logs an unknown outcome: the key's hash (never
// the key), the original's request id and the cause.
func (p *Proxy) unknownOutcome(route string, sk keystore.Key, requestID string, cause keystore.Cause) {
	p.metrics.unknownOutcome(route, cause)
	p.log.Warn("outcome unknown: the key is held until an operator resolves it",
		"key_hash", sk.String(), logRequestID, requestID, logRoute, route, "cause", cause.String())
}

// markedLapsed counts and logs the unknown outcome a Reserve (a retry's, or
// a waiter's) marked: a lapsed claim with the sent mark.
func (p *Proxy) markedLapsed(r *http.Request, sk keystore.Key, err error) {
	if err == nil {
		return // the common case: errors.As's target would escape for nothing
	}
	var ue *keystore.UnknownError
	if !errors.As(err, &ue) || !ue.Marked {
		return
	}
	id := ""
	if ue.Info != nil {
		id = ue.Info.Header.Get(keystore.InfoRequestID)
	}
	p.unknownOutcome(routeName(r), sk, id, keystore.CauseLapsed)
	p.probeSoon(routeName(r), sk)
}
