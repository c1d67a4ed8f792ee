package app

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/tlsconf"
	"github.com/idemgate/idemgate/tlsconf/redisstorage"
)

// tlsState is the public listener's TLS (tls.mode files or acme) and the
// plain-HTTP listener (ACME HTTP-01 and redirects to https).
type tlsState struct {
	config *tls.Config    // wraps the public listener; nil with tls.mode none
	acme   *tlsconf.ACME  // tls.mode acme
	files  *tlsconf.Files // tls.mode files
	http   *http.Server   // nil when there is no HTTP listener
}

// newTLS prepares what cfg.tls asks for: it loads the certificate files
// (refusing to start without a valid pair) or sets up ACME and its storage,
// in Redis through rdb (the store's client) when there is one. Nothing
// listens or contacts the CA before startTLS. Its closers go onto cs after
// the store's, so TLS closes first: the ACME storage releases its locks
// through the store's client.
func newTLS(cfg *config.Config, rdb redis.UniversalClient, log *slog.Logger, cs *closeStack) (*tlsState, error) {
	t := cfg.TLS
	ts := &tlsState{}
	serverLog := log
	log = log.With("component", "tls")
	switch t.Mode {
	case config.TLSFiles:
		f, err := tlsconf.NewFiles(tlsconf.FilesOptions{CertFile: t.CertFile, KeyFile: t.KeyFile, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		cs.push(f.Close)
		ts.files = f
		ts.config = f.TLSConfig()
	case config.TLSACME:
		opts := tlsconf.ACMEOptions{
			Domains: t.Domains,
			Email:   t.Email,
			CA:      t.CA,
			// TLS-ALPN-01 reaches port 443 only.
			TLSALPN: listenPort(cfg.Listen) == 443,
			Logger:  log,
		}
		if t.CARoot != "" {
			pem, err := os.ReadFile(t.CARoot)
			if err != nil {
				return nil, fmt.Errorf("tls.ca_root: %w", err)
			}
			roots, err := x509.SystemCertPool()
			if err != nil {
				roots = x509.NewCertPool()
			}
			if !roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("tls.ca_root: no PEM certificate in %s", t.CARoot)
			}
			opts.Roots = roots
		}
		if len(t.OnDemand.Allow) > 0 {
			allow, err := tlsconf.NewAllowList(t.OnDemand.Allow)
			if err != nil {
				return nil, fmt.Errorf("tls.on_demand.allow: %w", err)
			}
			opts.OnDemand = allow
		}
		if rdb != nil {
			s, err := redisstorage.New(rdb, redisstorage.Options{KeyPrefix: cfg.Store.Redis.KeyPrefix, Logger: log})
			if err != nil {
				return nil, fmt.Errorf("tls: %w", err)
			}
			cs.push(s.Close)
			opts.Storage = s
		} else {
			dir := t.StorageDir
			if dir == "" {
				dir = tlsconf.DefaultStorageDir()
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, fmt.Errorf("tls.storage_dir: %w", err)
			}
			opts.Storage = &certmagic.FileStorage{Path: dir}
		}
		m, err := tlsconf.NewACME(opts)
		if err != nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
		cs.push(m.Close) // stop renewals before the storage closes
		ts.acme = m
		ts.config = m.TLSConfig()
	default:
		return ts, nil
	}
	if t.EffectiveHTTPListen() != "" {
		ts.http = NewServer(nil, serverLog) // handler set by startTLS
	}
	return ts, nil
}

// startTLS binds the HTTP listener (unless lns.HTTP is set) and starts
// ACME; Serve then serves TLS on lns.Public (see watch). It runs before
// anything serves. On error it closes lns.
func (a *App) startTLS(lns *Listeners) (err error) {
	if a.tls.config == nil {
		return nil
	}
	defer func() {
		if err != nil {
			for _, l := range []net.Listener{lns.Public, lns.Admin, lns.HTTP} {
				if l != nil {
					l.Close()
				}
			}
		}
	}()
	httpsPort := listenPort(lns.Public.Addr().String())
	if a.tls.http != nil {
		if lns.HTTP == nil {
			if lns.HTTP, err = net.Listen("tcp", a.cfg.TLS.EffectiveHTTPListen()); err != nil {
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
		if lns.HTTP == nil {
			return errors.New("tls: ACME needs the HTTP listener")
		}
		if err := a.tls.acme.Start(lns.HTTP.Addr().String()); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	attrs := []any{"mode", a.cfg.TLS.Mode}
	if lns.HTTP != nil {
		attrs = append(attrs, "http_listen", lns.HTTP.Addr().String())
	}
	a.log.Info("tls on", attrs...)
	return nil
}

// expiries maps each served certificate's names to its expiry.
func (ts *tlsState) expiries() map[string]time.Time {
	out := map[string]time.Time{}
	if ts.files != nil {
		if c := ts.files.Certificate(); c != nil {
			leaf := c.Leaf
			if leaf == nil && len(c.Certificate) > 0 {
				leaf, _ = x509.ParseCertificate(c.Certificate[0])
			}
			if leaf != nil {
				leafExpiries(leaf, out)
			}
		}
	}
	if ts.acme != nil {
		for _, leaf := range ts.acme.Leaves() {
			leafExpiries(leaf, out)
		}
	}
	return out
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
