package app

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/connguard"
)

// Server timeouts (caddy's defaults): headers must arrive within a minute;
// idle keep-alive connections live five minutes. Request heads are capped
// by max_header_bytes (Serve's listeners count them; see watch).
const (
	readHeaderTimeout = time.Minute
	idleTimeout       = 5 * time.Minute
	maxHeaderBytes    = 64 << 10 // max_header_bytes' default
)

// NewServer returns an http.Server for h with idemgate's timeouts and
// limits, logging its errors to log. Its handler answers a request whose
// head a [connguard.Listener] marked (Content-Length with
// Transfer-Encoding) with "Connection: close", first thing.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           guarded(h),
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// guard is a server's handler: [connguard.Check] first, then h.
type guard struct{ h http.Handler }

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	connguard.Check(w, r)
	g.h.ServeHTTP(w, r)
}

// guarded wraps h (nil: nothing to wrap; a guard already is) in a guard.
func guarded(h http.Handler) http.Handler {
	if _, ok := h.(guard); ok || h == nil {
		return h
	}
	return guard{h}
}

// watch prepares s to serve on l under the max_header_bytes limit (DESIGN.md,
// Bounds), which a reload changes. A plain-text listener is wrapped in a
// [connguard.Listener] (CL+TE heads marked, the limit exact, read as each
// head starts). With tc (the public listener's TLS) l is the TCP listener
// under TLS: [connguard.NewTLSListener] serves TLS on it and watches the
// decrypted stream the same way, for HTTP/1.1 and, through an HTTP/2
// server on that stream, HTTP/2, whose header list limit is the limit
// exactly, read as each connection starts (see [connguard.ServeTLS]).
// s's own MaxHeaderBytes, which net/http reads unsynchronized and so
// never changes once s serves, is the largest limit the config accepts:
// the Listener's count decides alone.
func watch(s *http.Server, l net.Listener, limit *connguard.Limit, tc *tls.Config) (net.Listener, error) {
	s.MaxHeaderBytes = config.MaxHeaderBytesCeiling
	s.Handler = guarded(s.Handler)
	if tc == nil {
		return connguard.NewListener(l, limit), nil
	}
	if err := connguard.ServeTLS(s, limit); err != nil {
		return nil, err
	}
	return connguard.NewTLSListener(l, tc, limit, s.ErrorLog), nil
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
	// The cap follows reloads (applyLive sets a.conns): a listener takes
	// the live value under reload.mu, so a reload before it was wrapped
	// (tls.http_listen's is wrapped after the watcher starts) counts. So
	// does the max_header_bytes limit, one for every listener
	// (a.headerLimit).
	a.reload.mu.Lock()
	a.headerLimit = connguard.NewLimit(cmp.Or(a.reload.live, a.cfg).MaxHeaderBytes)
	a.reload.mu.Unlock()
	limited := func(l net.Listener) net.Listener {
		a.reload.mu.Lock()
		ll := newLimitListener(l, cmp.Or(a.reload.live, a.cfg).MaxConnections)
		a.conns = append(a.conns, ll)
		a.reload.mu.Unlock()
		return ll
	}
	pub, werr := watch(a.public, limited(lns.Public), a.headerLimit, a.tls.config)
	if werr != nil {
		return werr
	}
	adm, _ := watch(a.admin, limited(lns.Admin), a.headerLimit, nil)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveOn(a.public, pub) })
	g.Go(func() error { return serveOn(a.admin, adm) })
	a.startReload(gctx, g)
	g.Go(func() error {
		runReconcile(gctx, a.proxy, time.After, a.log)
		return nil
	})
	if a.tls.http != nil {
		h, _ := watch(a.tls.http, limited(lns.HTTP), a.headerLimit, nil)
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
