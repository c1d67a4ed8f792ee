package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/connguard"
	"github.com/idemgate/idemgate/internal/problem"
)

// Server timeouts (caddy's defaults): headers must arrive within a minute;
// idle keep-alive connections live five minutes. net/http's own head limit
// is config.MaxHeaderBytesCeiling, fixed (net/http reads it unsynchronized
// per request, and HTTP/2 advertises it per connection); max_header_bytes,
// which reloads live, is enforced below it by the [headLimit].
const (
	readHeaderTimeout = time.Minute
	idleTimeout       = 5 * time.Minute
)

// NewServer returns an http.Server for h with idemgate's timeouts and
// limits, logging its errors to log. Its handler answers a request whose
// head a [connguard.Listener] marked (Content-Length with
// Transfer-Encoding) with "Connection: close", first thing.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           guarded(h, nil),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    config.MaxHeaderBytesCeiling,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// guard is a server's handler: [connguard.Check] first, then the head
// limit (lim; nil: the server's own only), then h.
type guard struct {
	h   http.Handler
	lim *headLimit
}

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	connguard.Check(w, r)
	if connguard.Oversized(w, r) || (r.ProtoMajor == 2 && g.lim != nil && h2HeaderListSize(r) > g.lim.get()) {
		g.lim.refuse(w, r)
		return
	}
	g.h.ServeHTTP(w, r)
}

// guarded wraps h (nil: nothing to wrap) in a guard with the limit lim; a
// guard keeps its handler and takes lim.
func guarded(h http.Handler, lim *headLimit) http.Handler {
	if g, ok := h.(guard); ok {
		return guard{g.h, lim}
	}
	if h == nil {
		return h
	}
	return guard{h, lim}
}

// headLimit is max_header_bytes as it runs (DESIGN.md, Bounds): each
// watched listener counts HTTP/1 heads against it, exactly, from the next
// head on, and the guard checks HTTP/2 header lists against it per
// request. Both refuse with net/http's plain-text 431, with the request's
// ID. (net/http's own 431, at config.MaxHeaderBytesCeiling, is
// left for connections the listener no longer watches: after an Upgrade.)
type headLimit struct {
	n atomic.Int64
	// requestID is the request ID header's name (request_id_header);
	// nil: problem.RequestIDHeader.
	requestID func() string

	mu        sync.Mutex            // protects listeners
	listeners []*connguard.Listener // the watched listeners, set with n
}

func (l *headLimit) get() int { return int(l.n.Load()) }

// set sets the limit to n on every watched listener and the guards.
func (l *headLimit) set(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n.Store(int64(n))
	for _, cl := range l.listeners {
		cl.SetMaxHeaderBytes(n)
	}
}

// watched registers cl, which then follows the limit.
func (l *headLimit) watched(cl *connguard.Listener) *connguard.Listener {
	l.mu.Lock()
	defer l.mu.Unlock()
	cl.SetMaxHeaderBytes(l.get())
	l.listeners = append(l.listeners, cl)
	return cl
}

// headerTooLarge is the 431's body: net/http's own plain text, which
// DESIGN.md (Bounds) names as the one answer exempt from problem+json and
// the errors shapes.
const headerTooLarge = "431 Request Header Fields Too Large"

// refuse answers r with 431, as net/http's own server does (plain text;
// the connection closes after it on HTTP/1: connguard.Oversized set
// Connection: close), with the request's ID. l may be nil.
func (l *headLimit) refuse(w http.ResponseWriter, r *http.Request) {
	name := problem.RequestIDHeader
	if l != nil && l.requestID != nil {
		name = l.requestID()
	}
	h := w.Header()
	h.Set(name, problem.RequestID(r.Header.Get(name)))
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
	io.WriteString(w, headerTooLarge)
}

// h2FieldOverhead is what RFC 9113 §6.5.2 counts per header field beyond
// its name and value.
const h2FieldOverhead = 32

// h2HeaderListSize is r's header list size as RFC 9113 §6.5.2 defines it
// and Go's HTTP/2 server counts it against its own limit: each field's name
// and value plus 32 bytes, the pseudo-headers included (:method, :scheme,
// :authority, :path). Counted from the request net/http built: :scheme is
// "https" (HTTP/2 is served over TLS only), :authority is r.Host, :path is
// r.RequestURI, and several cookie fields count as the one Cookie field
// the server joined them into (each further field 30 bytes less).
func h2HeaderListSize(r *http.Request) int {
	n := len(":method") + len(r.Method) + len(":scheme") + len("https") +
		len(":authority") + len(r.Host) + len(":path") + len(r.RequestURI) + 4*h2FieldOverhead
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + h2FieldOverhead
		}
	}
	return n
}

// watch prepares s to serve on l under the head limit lim (DESIGN.md,
// Bounds). A plain-text listener is wrapped in a [connguard.Listener]
// (CL+TE heads marked, the limit exact). With tc (the public listener's
// TLS) l is the TCP listener under TLS: [connguard.NewTLSListener] serves
// TLS on it and watches the decrypted stream the same way, for HTTP/1.1
// and, through net/http's HTTP/2 server on that stream, HTTP/2, whose
// header list limit (advertised in SETTINGS_MAX_HEADER_LIST_SIZE) is
// config.MaxHeaderBytesCeiling, and lim is checked per request by the
// guard (see [connguard.ServeTLS]).
func watch(s *http.Server, l net.Listener, lim *headLimit, tc *tls.Config) net.Listener {
	s.MaxHeaderBytes = config.MaxHeaderBytesCeiling
	s.Handler = guarded(s.Handler, lim)
	if tc == nil {
		return lim.watched(connguard.NewListener(l, lim.get()))
	}
	s.MaxHeaderBytes = connguard.H2MaxHeaderBytes(config.MaxHeaderBytesCeiling)
	connguard.ServeTLS(s)
	return lim.watched(connguard.NewTLSListener(l, tc, lim.get(), s.ErrorLog))
}

// Listeners are an app's bound listeners; HTTP (tls.http_listen) is bound
// by Serve when nil and needed.
type Listeners struct{ Public, Admin, HTTP net.Listener }

// Listen binds the public and the admin addresses.
func Listen(public, admin string) (*Listeners, error) {
	p, err := net.Listen("tcp", public)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ad, err := net.Listen("tcp", admin)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("admin_listen: %w", err)
	}
	return &Listeners{Public: p, Admin: ad}, nil
}

// Serve listens on the configured addresses (or on lns, bound by the
// caller) and runs until ctx ends; then it drains: readiness turns off,
// requests in flight get grace to finish, and everything closes.
func (a *App) Serve(ctx context.Context, grace time.Duration, lns *Listeners) error {
	defer a.Close()
	if lns == nil {
		var err error
		if lns, err = Listen(a.cfg.Listen, a.cfg.AdminListen); err != nil {
			return err
		}
	}
	if err := a.startTLS(lns); err != nil {
		return err
	}
	// max_connections bounds each listener's open connections (DESIGN.md,
	// Hardening): at the cap, Accept waits until one closes, so new
	// clients queue in the kernel's accept backlog, as nginx's
	// worker_connections and HAProxy's maxconn do (rather than being
	// accepted and reset, which a client retries at once). The cap wraps
	// the TCP listener, under TLS: a handshake holds a slot too.
	// The cap follows reloads (applyLive sets a.conns).
	conns := a.cfg.MaxConnections
	limited := func(l net.Listener) net.Listener {
		ll := newLimitListener(l, conns)
		a.reload.mu.Lock()
		a.conns = append(a.conns, ll)
		a.reload.mu.Unlock()
		return ll
	}
	pub := watch(a.public, limited(lns.Public), &a.heads, a.tls.config)
	adm := watch(a.admin, limited(lns.Admin), &a.heads, nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveOn(a.public, pub) })
	g.Go(func() error { return serveOn(a.admin, adm) })
	a.startReload(gctx, g)
	g.Go(func() error {
		runReconcile(gctx, a.proxy, time.After, a.log)
		return nil
	})
	if a.tls.http != nil {
		h := watch(a.tls.http, limited(lns.HTTP), &a.heads, nil)
		g.Go(func() error { return serveOn(a.tls.http, h) })
	}
	a.ready.Store(true)
	a.log.Info("idemgate started", "listen", lns.Public.Addr().String(), "admin_listen", lns.Admin.Addr().String(),
		"upstream", a.cfg.Upstream.URL, "store", a.cfg.Store.Backend, "routes", len(a.cfg.Routes), "version", a.o.Version,
		"config", a.o.ConfigPath, "mode", a.cfg.Mode)
	// The shutdown's deadline: grace after the drain starts. The closers
	// get it too, so that the process ends within --grace (DESIGN.md,
	// Bounds). Set before the drain goroutine returns, read after Wait.
	closeCtx, stopClose := context.Background(), context.CancelFunc(func() {})
	g.Go(func() error {
		<-gctx.Done()
		a.draining.Store(true)
		a.log.Info("draining", "grace", grace.String())
		stopBy := time.Now().Add(grace)
		a.stopBy.Store(&stopBy)
		sctx, cancel := context.WithDeadline(context.Background(), stopBy)
		closeCtx, stopClose = sctx, cancel
		if err := a.public.Shutdown(sctx); err != nil {
			a.log.Error("in-flight requests did not finish within the grace period", "error", err)
		}
		if a.afterDrain != nil {
			a.afterDrain()
		}
		a.admin.Shutdown(sctx)
		if a.tls.http != nil {
			a.tls.http.Shutdown(sctx)
		}
		return nil
	})
	err := g.Wait()
	defer stopClose()
	if cerr := a.closers.closeCtx(closeCtx); cerr != nil {
		a.log.Warn("close", "error", cerr)
	}
	a.log.Info("idemgate stopped")
	return err
}

func serveOn(s *http.Server, l net.Listener) error {
	if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
