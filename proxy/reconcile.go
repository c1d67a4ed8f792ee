package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/keystore"
)

// Reconcile probes (DESIGN.md, Unknown outcomes, 3): a hold route may name
// a lookup on its upstream that tells whether an unknown record's write
// ran. The route's sent mark then also keeps, sealed with the rest of its
// info, what the probe needs of the original request: its Host, its
// identity headers and cookies, its path parameters and when it was sent
// (the info goes when the record resolves). The first probe goes out when
// the record becomes unknown, on the replica that marks it; then the
// wiring's loop ([Proxy.ReconcileUnknown]) probes every unknown record
// every `every`. A probe lease in the store lets one replica at a time
// probe a record, and is held for `every` after each probe; a process runs
// at most [MaxProbes] probes at once. Every resolution (found → complete,
// absent → release) is fenced by the record's claim id: the first
// resolution wins.

// MaxProbes bounds the reconcile probes a process runs at once.
const MaxProbes = 8

// Info header names of what a reconcile route's sent mark keeps for its
// probes, beside keystore's (InfoMethod and the others).
const (
	infoProbeHost   = "Probe-Host"
	infoProbeSentAt = "Probe-Sent-At" // Unix ms, the proxy's clock
	infoProbeHeader = "Probe-H-"      // + a header's canonical name
	infoProbeParam  = "Probe-P-"      // + a path parameter's name: its decoded value
)

// droppedFromProbe are a found answer's headers never stored, beyond the
// route's drop_headers and those an upstream answer loses: validators and
// freshness describe the lookup, not the write.
var droppedFromProbe = map[string]bool{
	"Etag": true, "Last-Modified": true, "Cache-Control": true, "Expires": true,
	"Date": true, "Content-Length": true, headerTraceResponse: true, headerServerTiming: true,
	// hop-by-hop (RFC 9110 §7.6.1)
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// probeSpec is a route's compiled reconcile probe.
type probeSpec struct {
	method        string
	tmpl          *pathtmpl.Template
	found, absent map[int]bool
	status        int
	every         time.Duration
}

// compileProbe compiles r's reconcile probe, if any.
func compileProbe(r *route) error {
	rc := r.Reconcile
	if rc == nil || !r.Idempotent {
		return nil
	}
	if !r.hold {
		return fmt.Errorf("proxy: route %q: reconcile needs unknown_outcome: hold", r.Name)
	}
	t, err := pathtmpl.Parse(rc.Path)
	if err != nil {
		return fmt.Errorf("proxy: route %q: reconcile path: %w", r.Name, err)
	}
	for _, name := range t.Params() {
		if name != "key" && !r.tmpl.HasParam(name) {
			return fmt.Errorf("proxy: route %q: reconcile path %s: {%s} is neither {key} nor a parameter of %s", r.Name, rc.Path, name, r.Path)
		}
	}
	ps := &probeSpec{method: http.MethodGet, tmpl: t, status: rc.Status, every: rc.Every,
		found: probeStatuses(rc.Found, 200), absent: probeStatuses(rc.Absent, 404)}
	if rc.Method == http.MethodHead {
		ps.method = http.MethodHead
	}
	if ps.every <= 0 {
		ps.every = 30 * time.Second
	}
	r.probe = ps
	return nil
}

// probeStatuses returns the statuses of l, or def when l is nil, as a set.
func probeStatuses(l []int, def int) map[int]bool {
	if l == nil {
		l = []int{def}
	}
	m := make(map[int]bool, len(l))
	for _, s := range l {
		m[s] = true
	}
	return m
}

// probeInfo adds to a reconcile route's sent-mark info what its probes
// need of r: Host, identity headers (Authorization and the identity's
// headers), Cookie, path parameters and the time it is sent.
func (p *Proxy) probeInfo(info *keystore.Response, r *http.Request, ex *exchange) {
	h := info.Header
	h[infoProbeHost] = []string{r.Host}
	h[infoProbeSentAt] = []string{strconv.FormatInt(p.deps.Now().UnixMilli(), 10)}
	names := []string{"Authorization", "Cookie"}
	if res := ex.snap.identity; res != nil {
		names = append(names, res.HeaderNames()...)
	}
	names = append(names, ex.snap.idem.IdentityHeaders...)
	for _, n := range names {
		n = http.CanonicalHeaderKey(n)
		if v := r.Header.Values(n); len(v) > 0 && h[infoProbeHeader+n] == nil {
			h[infoProbeHeader+n] = append([]string(nil), v...)
		}
	}
	if ex.route.tmpl != nil {
		for _, name := range ex.route.tmpl.Params() {
			v, _ := ex.match.Param(name)
			if dec, err := url.PathUnescape(v); err == nil {
				v = dec
			}
			h[infoProbeParam+name] = []string{v}
		}
	}
}

// prober runs the process's probes: at most MaxProbes at once, on
// goroutines it owns until close.
type prober struct {
	sem    chan struct{}
	ctx    context.Context // canceled by close
	cancel context.CancelFunc
	mu     sync.Mutex // protects closed and wg's Add
	closed bool
	wg     sync.WaitGroup
}

func newProber() *prober {
	ctx, cancel := context.WithCancel(context.Background())
	return &prober{sem: make(chan struct{}, MaxProbes), ctx: ctx, cancel: cancel}
}

// goTry runs f on a goroutine if a probe slot is free now (and the prober
// is open), and reports whether it did.
func (pr *prober) goTry(f func(ctx context.Context)) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.closed {
		return false
	}
	select {
	case pr.sem <- struct{}{}:
	default:
		return false
	}
	pr.wg.Add(1)
	go func() {
		defer pr.wg.Done()
		defer func() { <-pr.sem }()
		f(pr.ctx)
	}()
	return true
}

// goWait runs f on a goroutine once a probe slot is free, or gives up when
// ctx ends or the prober closes; it reports whether f runs.
func (pr *prober) goWait(ctx context.Context, wg *sync.WaitGroup, f func(ctx context.Context)) bool {
	select {
	case pr.sem <- struct{}{}:
	case <-ctx.Done():
		return false
	case <-pr.ctx.Done():
		return false
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.closed {
		<-pr.sem
		return false
	}
	pr.wg.Add(1)
	wg.Add(1)
	go func() {
		defer pr.wg.Done()
		defer wg.Done()
		defer func() { <-pr.sem }()
		f(pr.ctx)
	}()
	return true
}

// close stops the probes and waits for them.
func (pr *prober) close() {
	pr.mu.Lock()
	pr.closed = true
	pr.mu.Unlock()
	pr.cancel()
	pr.wg.Wait()
}

// probeSoon sends the first probe of sk's record, just marked unknown on
// route, in the background when a probe slot is free (else the wiring's
// loop probes it within half an `every`).
func (p *Proxy) probeSoon(routeName string, sk keystore.Key) {
	snap := p.cur.Load()
	rt := snap.probeRoute(routeName)
	if rt == nil {
		return
	}
	p.probes.goTry(func(ctx context.Context) {
		gctx, cancel := context.WithTimeout(ctx, storeTimeout)
		rec, err := p.deps.Store.Get(gctx, sk)
		cancel()
		if err != nil || rec.State != keystore.StateUnknown {
			return
		}
		p.reconcile(ctx, snap, rt, rec)
	})
}

// probeRoute returns the route of snap called name if it has a reconcile
// probe, or nil (also for a nil snap: before the first Apply). A probe
// runs on the one snapshot its route came from, to its end: its route,
// the upstream it asks and the answer's cap are of one policy, whatever
// a reload swaps in meanwhile.
func (snap *snapshot) probeRoute(name string) *route {
	if snap == nil {
		return nil
	}
	for _, r := range snap.routes {
		if r.Name == name && r.probe != nil {
			return r
		}
	}
	return nil
}

// reconcileEvery returns the shortest `every` of snap's reconcile probes,
// or 0 when no route has one (or snap is nil).
func (snap *snapshot) reconcileEvery() time.Duration {
	if snap == nil {
		return 0
	}
	var d time.Duration
	for _, r := range snap.routes {
		if r.probe != nil && (d == 0 || r.probe.every < d) {
			d = r.probe.every
		}
	}
	return d
}

// ReconcileEvery returns the shortest `every` of the current routes'
// reconcile probes, or 0 when no route has one: the wiring lists unknown
// records every half of it.
func (p *Proxy) ReconcileEvery() time.Duration {
	return p.cur.Load().reconcileEvery()
}

// ReconcileUnknown probes the unknown records of routes with a reconcile
// probe, up to limit of them (the oldest), at most MaxProbes at once, and
// returns when every probe it started is over, with how many it started.
// A record another replica probes now, or probed less than `every` ago,
// is left alone (the store's probe lease).
func (p *Proxy) ReconcileUnknown(ctx context.Context, limit int) (int, error) {
	us, ok := p.deps.Store.(keystore.UnknownStore)
	snap := p.cur.Load() // one policy for the whole pass
	if !ok || snap.reconcileEvery() == 0 {
		return 0, nil
	}
	lctx, cancel := context.WithTimeout(ctx, storeTimeout)
	recs, err := us.Unknown(lctx, limit)
	cancel()
	var damaged *keystore.DamagedError
	if err != nil && !errors.As(err, &damaged) {
		return 0, err
	}
	var wg sync.WaitGroup
	n := 0
	for _, rec := range recs {
		rt := snap.probeRoute(rec.Route)
		if rt == nil {
			continue
		}
		if !p.probes.goWait(ctx, &wg, func(pctx context.Context) { p.reconcile(pctx, snap, rt, rec) }) {
			break
		}
		n++
	}
	wg.Wait()
	return n, nil
}

// reconcile probes one unknown record of route rt of snap, if its probe
// lease is free, and records the result: the record resolved (found,
// released), the probe state for the next prober, the metric and the log.
func (p *Proxy) reconcile(ctx context.Context, snap *snapshot, rt *route, rec keystore.Record) {
	us, ok := p.deps.Store.(keystore.UnknownStore)
	if !ok || rec.Info == nil || rec.Info.Header.Get(infoProbeHost) == "" {
		return // marked before the route had a probe: nothing to probe with
	}
	ps := rt.probe
	probeTimeout := rt.timeout
	sctx, cancel := context.WithTimeout(ctx, storeTimeout)
	lease, ok, err := us.AcquireProbe(sctx, rec.Key, probeTimeout+storeTimeout)
	cancel()
	if err != nil || !ok {
		return
	}
	st := lease.State
	if st.ClaimID != rec.ClaimID {
		st = keystore.ProbeState{ClaimID: rec.ClaimID}
	}
	start := p.deps.Now()
	status, resp, err := p.sendProbe(ctx, snap, rt, rec.Info, probeTimeout)
	result := keystore.ProbeError
	switch {
	case err != nil:
	case ps.found[status]:
		result = keystore.ProbeFound
	case ps.absent[status]:
		result = keystore.ProbeAbsent
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		result = keystore.ProbeDenied
	default:
		result = keystore.ProbeOther
	}
	var resolve *keystore.Response
	release := false
	switch result {
	case keystore.ProbeFound:
		resolve = resp
	case keystore.ProbeAbsent:
		if start.Before(p.absentFrom(rt, rec)) {
			st.AbsentSince = time.Time{} // the write may still be running: this answer proves nothing
			break
		}
		if st.AbsentSince.IsZero() {
			st.AbsentSince = start
		} else if start.Sub(st.AbsentSince) >= ps.every {
			release = true
		}
	default:
		st.AbsentSince = time.Time{} // a run of absent answers is broken
	}
	if resolve != nil || release {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		err := us.Resolve(sctx, rec.Key, rec.ClaimID, resolve)
		cancel()
		switch {
		case err == nil:
			st.Resolved = true
			if release {
				result = keystore.ProbeReleased
			}
			p.notify(rec.Key)
			p.log.Info("unknown record resolved by a reconcile probe", "key_hash", rec.Key.String(), logRoute, rt.Name,
				logRequestID, rec.Info.Header.Get(keystore.InfoRequestID), "result", result, "probes", st.Probes+1)
		case errors.Is(err, keystore.ErrLeaseLost), errors.Is(err, keystore.ErrNotFound):
			result = keystore.ProbeLost
			p.log.Info("a reconcile probe's resolution was rejected: the record was resolved first", "key_hash", rec.Key.String(),
				logRoute, rt.Name, "probe_result", result)
		default:
			result = keystore.ProbeError
			p.log.Warn("resolving an unknown record after its probe failed", "error", err, "key_hash", rec.Key.String(), logRoute, rt.Name)
		}
	}
	if result == keystore.ProbeError && err != nil {
		p.log.Warn("reconcile probe failed", "error", err, "key_hash", rec.Key.String(), logRoute, rt.Name)
	}
	p.metrics.reconcileProbe(rt.Name, result)
	st.Probes++
	st.Last, st.LastAt = result, start
	keep := max(rec.Expires.Sub(p.deps.Now()), ps.every)
	sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	if err := us.EndProbe(sctx, rec.Key, lease.Owner, st, ps.every, keep); err != nil && !errors.Is(err, keystore.ErrLeaseLost) {
		p.log.Warn("recording a reconcile probe's state failed", "error", err, "key_hash", rec.Key.String(), logRoute, rt.Name)
	}
}

// absentFrom is when an absent answer about rec starts to count: its
// original was forwarded (the sent mark's time; the claim's when the
// mark has none) plus the route's timeout and late_answer_wait, by which
// time it cannot be running any more.
func (p *Proxy) absentFrom(rt *route, rec keystore.Record) time.Time {
	sent := rec.Claimed
	if ms, err := strconv.ParseInt(rec.Info.Header.Get(infoProbeSentAt), 10, 64); err == nil {
		sent = time.UnixMilli(ms)
	}
	return sent.Add(rt.timeout + rt.lateWait)
}

// sendProbe sends rt's probe for the record whose sent-mark info is info,
// through the proxy's transport to snap's upstream, and returns the
// answer's status and, for a found status, the answer to store (too large
// past snap's max_response_bytes). err is set when there was no whole
// answer.
func (p *Proxy) sendProbe(ctx context.Context, snap *snapshot, rt *route, info *keystore.Response, timeout time.Duration) (int, *keystore.Response, error) {
	ps := rt.probe
	path, err := ps.tmpl.Fill(func(name string) (string, bool) {
		if name == "key" {
			k := info.Header.Get(keystore.InfoKey)
			return k, k != ""
		}
		v, ok := info.Header[infoProbeParam+name]
		if !ok || len(v) == 0 {
			return "", false
		}
		return v[0], true
	})
	if err != nil {
		return 0, nil, err
	}
	up := &snap.src.Upstream
	u := *up.URL
	u.RawPath = strings.TrimSuffix(up.URL.EscapedPath(), "/") + path
	u.Path, err = url.PathUnescape(u.RawPath)
	if err != nil {
		return 0, nil, err
	}
	u.Fragment, u.RawFragment = "", ""
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, ps.method, u.String(), nil)
	if err != nil {
		return 0, nil, err
	}
	if !up.Host {
		req.Host = info.Header.Get(infoProbeHost)
	}
	for k, v := range info.Header {
		if name, ok := strings.CutPrefix(k, infoProbeHeader); ok {
			req.Header[name] = v
		}
	}
	req.Header.Set("User-Agent", "idemgate-reconcile")
	res, err := p.deps.Transport.RoundTrip(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	max := snap.idem.MaxResponseBytes
	body, err := io.ReadAll(io.LimitReader(res.Body, max+1))
	if err != nil {
		return 0, nil, err
	}
	if !ps.found[res.StatusCode] {
		return res.StatusCode, nil, nil
	}
	status := res.StatusCode
	if ps.status > 0 {
		status = ps.status
	}
	if int64(len(body)) > max {
		return res.StatusCode, &keystore.Response{Status: status, TooLarge: true}, nil
	}
	h := make(http.Header, len(res.Header))
	for _, c := range res.Header.Values("Connection") {
		for f := range strings.SplitSeq(c, ",") {
			res.Header.Del(strings.TrimSpace(f))
		}
	}
	for k, v := range res.Header {
		if rt.drop[k] || droppedFromProbe[k] {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	if ps.method == http.MethodHead {
		body = nil
	}
	return res.StatusCode, &keystore.Response{Status: status, Header: h, Body: body}, nil
}
