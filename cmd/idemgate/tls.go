package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/tlsconf"
	"github.com/idemgate/idemgate/tlsconf/redisstorage"
)

// tlsState is the public listener's TLS (tls.mode files or acme) and the
// plain-HTTP listener (ACME HTTP-01 and redirects to https).
type tlsState struct {
	rdb    redis.UniversalClient // the store's Redis client; nil with the memory store
	config *tls.Config           // wraps the public listener; nil with tls.mode none
	acme   *tlsconf.ACME         // tls.mode acme
	http   *http.Server          // nil when there is no HTTP listener
}

// buildTLS prepares what cfg.tls asks for: it loads the certificate files
// (refusing to start without a valid pair) or sets up ACME and its
// storage. Nothing listens or contacts the CA before startTLS. It runs
// after openStore, whose Redis client the ACME storage shares.
func (a *app) buildTLS() error {
	t := a.cfg.TLS
	log := a.log.With("component", "tls")
	// TLS closes before the store and its Redis client: the ACME storage
	// releases its locks through that client.
	var closers []func() error
	defer func() { a.closers = append(closers, a.closers...) }()
	switch t.Mode {
	case config.TLSFiles:
		f, err := tlsconf.NewFiles(tlsconf.FilesOptions{CertFile: t.CertFile, KeyFile: t.KeyFile, Logger: log})
		if err != nil {
			return fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		closers = append(closers, f.Close)
		a.tls.config = f.TLSConfig()
	case config.TLSACME:
		opts := tlsconf.ACMEOptions{
			Domains: t.Domains,
			Email:   t.Email,
			CA:      t.CA,
			// TLS-ALPN-01 reaches port 443 only.
			TLSALPN: listenPort(a.cfg.Listen) == 443,
			Logger:  log,
		}
		if t.CARoot != "" {
			pem, err := os.ReadFile(t.CARoot)
			if err != nil {
				return fmt.Errorf("tls.ca_root: %w", err)
			}
			roots, err := x509.SystemCertPool()
			if err != nil {
				roots = x509.NewCertPool()
			}
			if !roots.AppendCertsFromPEM(pem) {
				return fmt.Errorf("tls.ca_root: no PEM certificate in %s", t.CARoot)
			}
			opts.Roots = roots
		}
		if len(t.OnDemand.Allow) > 0 {
			allow, err := tlsconf.NewAllowList(t.OnDemand.Allow)
			if err != nil {
				return fmt.Errorf("tls.on_demand.allow: %w", err)
			}
			opts.OnDemand = allow
		}
		if a.tls.rdb != nil {
			s, err := redisstorage.New(a.tls.rdb, redisstorage.Options{KeyPrefix: a.cfg.Store.Redis.KeyPrefix, Logger: log})
			if err != nil {
				return fmt.Errorf("tls: %w", err)
			}
			closers = append(closers, s.Close)
			opts.Storage = s
		} else {
			dir := t.StorageDir
			if dir == "" {
				dir = tlsconf.DefaultStorageDir()
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("tls.storage_dir: %w", err)
			}
			opts.Storage = &certmagic.FileStorage{Path: dir}
		}
		m, err := tlsconf.NewACME(opts)
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
		closers = append([]func() error{m.Close}, closers...) // stop renewals before the storage closes
		a.tls.acme = m
		a.tls.config = m.TLSConfig()
	default:
		return nil
	}
	if t.EffectiveHTTPListen() != "" {
		a.tls.http = newServer(nil, a.log) // handler set by startTLS
	}
	return nil
}

// startTLS binds the HTTP listener (unless lns.http is set), starts ACME
// and wraps lns.public in TLS. It runs before anything serves. On error it
// closes lns.
func (a *app) startTLS(lns *listeners) (err error) {
	if a.tls.config == nil {
		return nil
	}
	defer func() {
		if err != nil {
			for _, l := range []net.Listener{lns.public, lns.admin, lns.http} {
				if l != nil {
					l.Close()
				}
			}
		}
	}()
	httpsPort := listenPort(lns.public.Addr().String())
	if a.tls.http != nil {
		if lns.http == nil {
			if lns.http, err = net.Listen("tcp", a.cfg.TLS.EffectiveHTTPListen()); err != nil {
				return fmt.Errorf("tls.http_listen: %w", err)
			}
		}
		var h http.Handler = tlsconf.RedirectHandler(httpsPort)
		if a.tls.acme != nil {
			h = a.tls.acme.HTTPHandler(h)
		}
		a.tls.http.Handler = h
	}
	if a.tls.acme != nil {
		if lns.http == nil {
			return errors.New("tls: ACME needs the HTTP listener")
		}
		if err := a.tls.acme.Start(lns.http.Addr().String()); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	lns.public = tls.NewListener(lns.public, a.tls.config)
	attrs := []any{"mode", a.cfg.TLS.Mode}
	if lns.http != nil {
		attrs = append(attrs, "http_listen", lns.http.Addr().String())
	}
	a.log.Info("tls on", attrs...)
	return nil
}

// listenPort is addr's port, 0 if it has none.
func listenPort(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}
