package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"
)

// Server timeouts (caddy's defaults): headers must arrive within a minute;
// idle keep-alive connections live five minutes; headers are at most 1 MiB.
const (
	readHeaderTimeout = time.Minute
	idleTimeout       = 5 * time.Minute
	maxHeaderBytes    = 1 << 20
)

// NewServer returns an http.Server for h with idemgate's timeouts and
// limits, logging its errors to log.
func NewServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
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
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveOn(a.public, lns.Public) })
	g.Go(func() error { return serveOn(a.admin, lns.Admin) })
	a.startReload(gctx, g)
	if a.tls.http != nil {
		g.Go(func() error { return serveOn(a.tls.http, lns.HTTP) })
	}
	a.ready.Store(true)
	a.log.Info("idemgate started", "listen", lns.Public.Addr().String(), "admin_listen", lns.Admin.Addr().String(),
		"upstream", a.cfg.Upstream.URL, "store", a.cfg.Store.Backend, "routes", len(a.cfg.Routes), "version", a.o.Version,
		"config", a.o.ConfigPath, "mode", a.cfg.Mode)
	g.Go(func() error {
		<-gctx.Done()
		a.draining.Store(true)
		a.log.Info("draining", "grace", grace.String())
		stopBy := time.Now().Add(grace)
		a.stopBy.Store(&stopBy)
		sctx, cancel := context.WithDeadline(context.Background(), stopBy)
		defer cancel()
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
	if cerr := a.Close(); cerr != nil {
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
