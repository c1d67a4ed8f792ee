package proxy

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/session"
)

// sessionTurn returns DESIGN.md step 6 on the queue q (nil: no stage): a
// request on a route with a session waits for its session's turn in q
// before it goes on, and gives the turn back when the rest of the chain
// returns. It runs after the claim, so a duplicate of a waiting keyed
// request gets 409 in progress instead of a second place in the line, and
// the claim's lease is renewed while it waits.
//
// A request without the session id (or on a route without a session) takes
// no turn. A full line or a wait over the queue timeout gets 503
// session_busy with Retry-After: 1 (for a keyed write, the wait also ends
// when its route timeout, counted from arrival, would); a client that hangs up while it waits
// leaves the line and is answered nothing (logged as 499). In both cases
// the request never reached the upstream, so the claim stage releases its
// key.
//
// Requests share a line when they have the same tenant (the idempotency
// stage's [Idempotency.TenantFor]) and the same session: for a path
// parameter, the same normalized path up to and including the parameter's
// segment (see [pathBefore]; so PUT /carts/{id} and GET /carts/{id}/items share one, and
// /carts/x and /orders/x do not); for a header, the same header name and
// value. The line's [session.Key] hashes them: raw ids never reach the
// store.
func (p *Proxy) sessionTurn(q *session.Queue) middleware {
	if q == nil {
		return nil
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, ok := sessionKey(r)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			// A keyed write's timeout counts from its arrival, session
			// wait included (DESIGN.md step 7): its wait ends at
			// queue_timeout or at what remains of it, whichever is first.
			var deadline time.Time
			if ex := exchangeOf(r); ex != nil && ex.kw != nil && ex.route != nil {
				deadline = ex.start.Add(ex.route.timeout)
			}
			ctx, span := p.startSpan(r.Context(), spanSessionWait)
			turn, err := q.AcquireUntil(ctx, k, deadline)
			endSpan(span, err)
			if err != nil {
				switch {
				case errors.Is(err, session.ErrQueueFull):
					writeProblem(w, r, problemSessionBusy)
				case errors.Is(err, session.ErrTimeout):
					writeProblem(w, r, problemSessionTimeout)
				default:
					// The client left while it waited: nothing to answer.
					if ex := exchangeOf(r); ex != nil {
						ex.unanswered(OutcomeSessionBusy)
					}
				}
				return
			}
			// A kept call keeps its turn and lock until it ends (late.go);
			// the usual request makes no closure for after (issue 31).
			defer func() {
				if ex := exchangeOf(r); ex.kept() {
					ex.after(turn.End)
					return
				}
				turn.End()
			}()
			next.ServeHTTP(w, r)
		})
	}
}

// sessionID returns the session id of r on its route and whether the route
// takes turns with one: the path parameter's normalized value (case kept,
// see [pathtmpl.Match.Param]) or the header's value. A request without the id takes no turn.
func sessionID(r *http.Request) (id string, ok bool) {
	ex := exchangeOf(r)
	if ex == nil || ex.route == nil {
		return "", false
	}
	s := ex.route.Session
	switch {
	case s.Param != "":
		return ex.match.Param(s.Param)
	case s.Header != "":
		v := r.Header.Get(s.Header)
		return v, v != ""
	}
	return "", false
}

// sessionKey returns the key of r's session line, and whether r takes a
// turn.
func sessionKey(r *http.Request) (session.Key, bool) {
	id, ok := sessionID(r)
	if !ok {
		return session.Key{}, false
	}
	ex := exchangeOf(r)
	s := ex.route.Session
	tenant, _ := ex.tenantOf(r.Host) // an unknown host's unkeyed requests share tenant ""
	if s.Header != "" {
		return session.NewKey("session/v1", tenant, "header", http.CanonicalHeaderKey(s.Header), id), true
	}
	return session.NewKey("session/v1", tenant, "path", pathBefore(&ex.match, s.Param), id), true
}

// pathBefore returns the part of the normalized path that m matched before
// the segment of the parameter param, written from the template: its
// literal segments as the template spells them (so every spelling that
// matches the route shares a line) and the normalized values of its
// parameters. For /shops/{shop}/carts/{id} and id, /shops/a/carts/ of
// /shops/%61/Carts/x.
func pathBefore(m *pathtmpl.Match, param string) string {
	var b strings.Builder
	b.WriteByte('/')
	tmpl := m.Template.String()
	for seg := range strings.SplitSeq(strings.TrimPrefix(tmpl, "/"), "/") {
		if name, ok := strings.CutPrefix(seg, "{"); ok {
			name = strings.TrimSuffix(name, "}")
			if name == param {
				break
			}
			v, _ := m.Param(name)
			b.WriteString(v)
		} else {
			b.WriteString(seg)
		}
		b.WriteByte('/')
	}
	return b.String()
}
