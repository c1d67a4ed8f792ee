package proxy

import (
	"errors"
	"net/http"
	"strings"

	"github.com/idemgate/idemgate/session"
)

// SessionTurn returns DESIGN.md step 6: a request on a route with a session
// waits for its session's turn in q before it goes on, and gives the turn
// up when the rest of the chain returns. It runs after the claim, so a
// duplicate of a waiting keyed request gets 409 in progress instead of a
// second place in the line, and the claim's lease is renewed while it
// waits.
//
// A request without the session id (or on a route without a session) takes
// no turn. A full line or a wait over the queue timeout gets 503
// session_busy with Retry-After: 1; a client that hangs up while it waits
// leaves the line and is answered nothing (logged as 499). In both cases
// the request never reached the upstream, so the idempotency stage releases
// its key.
//
// Requests share a line when they have the same tenant (decided from idem
// as the idempotency stage does: pass the same [Idempotency]) and the same
// session: for a path parameter, the same escaped path up to and including
// the parameter's segment (so PUT /carts/{id} and GET /carts/{id}/items
// share one, and /carts/x and /orders/x do not); for a header, the same
// header name and value. The line's [session.Key] hashes them: raw ids
// never reach the store.
func SessionTurn(q *session.Queue, idem Idempotency) (Middleware, error) {
	if q == nil {
		return nil, errors.New("proxy: SessionTurn needs a session.Queue")
	}
	// tenant is the idempotency stage's own rule, on the same options.
	tenant := (&Proxy{opts: Options{Idempotency: idem}}).tenant
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			k, ok := sessionKey(r, tenant)
			if !ok {
				next.ServeHTTP(w, r)
				return
			}
			turn, err := q.Acquire(r.Context(), k)
			if err != nil {
				switch {
				case errors.Is(err, session.ErrQueueFull):
					WriteProblem(w, r, ProblemSessionBusy)
				case errors.Is(err, session.ErrTimeout):
					WriteProblem(w, r, problemSessionTimeout)
				default:
					// The client left while it waited: nothing to answer.
					if ex := exchangeOf(r); ex != nil {
						ex.outcome = OutcomeSessionBusy
					}
				}
				return
			}
			defer turn.Release()
			next.ServeHTTP(w, r)
		})
	}, nil
}

// problemSessionTimeout is session_busy for a wait over the queue timeout.
var problemSessionTimeout = func() Problem {
	p := ProblemSessionBusy
	p.Detail = "This session's earlier requests took too long; retry later"
	return p
}()

// sessionKey returns the key of r's session line, and whether r takes a
// turn.
func sessionKey(r *http.Request, tenant func(host string) string) (session.Key, bool) {
	id, ok := SessionID(r)
	if !ok {
		return session.Key{}, false
	}
	ex := exchangeOf(r)
	s := ex.route.Session
	if s.Header != "" {
		return session.NewKey("session/v1", tenant(r.Host), "header", http.CanonicalHeaderKey(s.Header), id), true
	}
	return session.NewKey("session/v1", tenant(r.Host), "path", pathBefore(ex.params, ex.route.tmpl.String(), s.Param), id), true
}

// pathBefore returns the part of the escaped path p, matched by template
// tmpl, that comes before the segment of the parameter param: for
// /shops/{shop}/carts/{id} and id, /shops/a/carts/ of /shops/a/carts/x.
func pathBefore(p, tmpl, param string) string {
	seg := "{" + param + "}"
	n := 0 // the parameter's segment index
	for i := 0; ; n++ {
		j := strings.IndexByte(tmpl[i:], '/')
		end := len(tmpl)
		if j >= 0 {
			end = i + j
		}
		if tmpl[i:end] == seg {
			break
		}
		if j < 0 {
			return p // not reached: New checks the parameter exists
		}
		i = end + 1
	}
	// The matched path has the template's segments: cut after its n-th "/".
	off := 0
	for ; n > 0; n-- {
		j := strings.IndexByte(p[off:], '/')
		if j < 0 {
			return p
		}
		off += j + 1
	}
	return p[:off]
}
