package proxy

import (
	"io"
	"net/http"

	"github.com/idemgate/idemgate/keystore"
)

// keyedWrite is a keyed write under its claim: what DESIGN.md steps 7 and
// 8 need to record its answer. The claim stage makes it when the store
// grants a claim ([Proxy.runClaimed]) and the request reaches it through
// its exchange (ex.kw, nil for every other request: pass-throughs,
// refusals, replays, observed forwards). It lives in memory the exchange
// holds anyway (issue 31).
type keyedWrite struct {
	p     *Proxy
	r     *http.Request // the request as the claim stage got it
	ex    *exchange
	sk    keystore.Key
	claim keystore.Claim
	lease *leaseHandle
	// capture is the answer kept for storage, from when its headers
	// arrive (modifyResponse); body is its body as ReverseProxy reads it.
	capture capture
	body    answerBody
	// kept is the upstream call that runs on after the client got its
	// 504 (late.go); nil while the handler owns the request.
	kept     *lateCall
	recorded bool
	result   recordResult // what the record did, for the outcome
}

// recordResult is what the record step did with a keyed write's claim.
type recordResult uint8

const (
	notRecorded    recordResult = iota
	recordUnsent                // nothing reached the upstream: released
	recordUnknown               // no whole answer: the claim is kept (or marked unknown)
	recordReleased              // an answer the route releases on: released
	recordStored                // the answer was stored
)

// record is DESIGN.md step 8 for kw, run once: as soon as the whole answer
// was read ([keyedWrite.answer], [answerBody]), before its last bytes
// reach the client, so that a retry sent after the client got the answer
// always finds it stored; otherwise when the request is over (a panic
// included: ErrAbortHandler when the upstream's body broke mid-stream,
// and the claim is kept), or, for a kept call, when the call ends
// (late.go). A kept call's goroutine and the handler both may reach it:
// it then runs under the call's lock.
func (kw *keyedWrite) record() {
	if lc := kw.ex.call.late; lc != nil {
		lc.mu.Lock()
		defer lc.mu.Unlock()
	}
	if kw.recorded {
		return
	}
	kw.recorded = true
	kw.lease.stop()
	defer kw.lease.finish()
	kw.p.record(kw)
}

// answer starts keeping the upstream's answer res for storage: its head
// now, its body as ReverseProxy reads it. An answer without a body is
// whole at once.
func (kw *keyedWrite) answer(res *http.Response) {
	whole := kw.capture.start(res, kw.ex.route.drop)
	kw.body = answerBody{ReadCloser: res.Body, kw: kw}
	res.Body = &kw.body
	if whole {
		kw.record()
	}
}

// answerBody is a keyed write's answer body: every read is teed into the
// write's capture, and the read that completes the answer records it
// before ReverseProxy passes those bytes on.
type answerBody struct {
	io.ReadCloser
	kw *keyedWrite
}

func (b *answerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.kw.capture.tee(p[:n], err) {
		b.kw.record()
	}
	return n, err
}

// outcome is the outcome of the keyed write (see [exchange.outcome]):
// problem is the problem writer's, "" when it wrote none.
func (kw *keyedWrite) outcome(problem string) string {
	switch {
	case kw.kept != nil && (kw.result == recordReleased || kw.result == recordStored):
		return OutcomeLate // recorded after the client got 504
	case kw.result == recordReleased:
		return OutcomeReleased
	case problem != "":
		return problem
	case kw.result == recordUnknown:
		return OutcomeUpstreamError
	}
	return OutcomeExecuted
}
