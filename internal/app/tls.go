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
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/tlsconf"
	"github.com/idemgate/idemgate/tlsconf/redisstorage"
)

// tlsState is the public listener's TLS (tls.mode files or acme) and the
// plain-HTTP listener (ACME HTTP-01 and redirects to https). The
// certificate source reloads live: config is the listener's tls.Config for
// good, and hands every handshake (GetConfigForClient) the current
// source's, so a reload that rebuilds the source (newTLSSource) applies
// from the next handshake on; connections already up keep theirs.
type tlsState struct {
	config *tls.Config  // wraps the public listener; nil with tls.mode none
	http   *http.Server // nil when there is no HTTP listener
	cur    atomic.Pointer[tlsSource]

	// build makes a source for a config: newTLSSource with the store's
	// Redis client and the app's logger.
	build func(cfg *config.Config) (*tlsSource, error)
	// mu protects httpAddr and closed; it orders swaps and Close.
	mu       sync.Mutex
	httpAddr string // the HTTP listener's address, once startTLS bound it
	closed   bool
}

// tlsSource is one build of the certificate source: the files' pair or
// the ACME manager, the tls.Config around it, and what it opened.
type tlsSource struct {
	acme    *tlsconf.ACME  // tls.mode acme
	files   *tlsconf.Files // tls.mode files
	config  *tls.Config
	closers closeStack
}

// newTLS prepares what cfg.tls asks for: it loads the certificate files
// (refusing to start without a valid pair) or sets up ACME and its storage,
// in Redis through rdb (the store's client) when there is one. Nothing
// listens or contacts the CA before startTLS. Its closer goes onto cs after
// the store's, so TLS closes first: the ACME storage releases its locks
// through the store's client.
func newTLS(cfg *config.Config, rdb redis.UniversalClient, log *slog.Logger, cs *closeStack) (*tlsState, error) {
	ts := &tlsState{build: func(cfg *config.Config) (*tlsSource, error) {
		return newTLSSource(cfg, rdb, log.With("component", "tls"))
	}}
	if cfg.TLS.Mode != config.TLSFiles && cfg.TLS.Mode != config.TLSACME {
		return ts, nil
	}
	src, err := ts.build(cfg)
	if err != nil {
		return nil, err
	}
	ts.cur.Store(src)
	cs.push(ts.close)
	ts.config = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return ts.cur.Load().config, nil
	}}
	if cfg.TLS.EffectiveHTTPListen() != "" {
		ts.http = NewServer(nil, log) // handler set by startTLS
	}
	return ts, nil
}

// newTLSSource builds the certificate source of cfg.tls (files or acme).
func newTLSSource(cfg *config.Config, rdb redis.UniversalClient, log *slog.Logger) (_ *tlsSource, err error) {
	t := cfg.TLS
	src := &tlsSource{}
	defer func() {
		if err != nil {
			src.closers.close()
		}
	}()
	switch t.Mode {
	case config.TLSFiles:
		f, err := tlsconf.NewFiles(tlsconf.FilesOptions{CertFile: t.CertFile, KeyFile: t.KeyFile, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		src.closers.push(f.Close)
		src.files, src.config = f, f.TLSConfig()
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
			src.closers.push(s.Close)
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
		src.closers.push(m.Close) // stop renewals before the storage closes
		src.acme, src.config = m, m.TLSConfig()
	default:
		return nil, fmt.Errorf("tls.mode %q has no certificate source", t.Mode)
	}
	return src, nil
}

// rebuild builds the certificate source of cfg (a reload that changed a
// tls key) and starts it as startTLS started the first; the caller swaps
// it in (swap) once the rest of the reload succeeded, or closes it. With
// no TLS (tls.mode none, which needs a restart to change) it returns nil.
func (ts *tlsState) rebuild(cfg *config.Config) (*tlsSource, error) {
	if ts.cur.Load() == nil {
		return nil, nil
	}
	src, err := ts.build(cfg)
	if err != nil {
		return nil, err
	}
	ts.mu.Lock()
	addr := ts.httpAddr
	ts.mu.Unlock()
	if src.acme != nil && addr != "" {
		if err := src.acme.Start(addr); err != nil {
			src.closers.close()
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	return src, nil
}

// swap makes src the source of the next handshakes and closes the one it
// replaces (handshakes already past GetConfigForClient finish on it).
// After close it closes src instead.
func (ts *tlsState) swap(src *tlsSource) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		src.closers.close()
		return
	}
	old := ts.cur.Swap(src)
	if old != nil {
		old.closers.close()
	}
}

// close closes the running source; later swaps close theirs.
func (ts *tlsState) close() error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	if src := ts.cur.Load(); src != nil {
		return src.closers.close()
	}
	return nil
}

// httpHandler is the HTTP listener's handler: ACME's HTTP-01 answers (of
// the running source: challenges started by a replaced one are answered
// through the shared storage) in front of next.
func (ts *tlsState) httpHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if src := ts.cur.Load(); src != nil && src.acme != nil {
			src.acme.HTTPHandler(next).ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
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
		a.tls.http.Handler = a.tls.httpHandler(tlsconf.RedirectHandler(httpsPort))
	}
	if src := a.tls.cur.Load(); src.acme != nil {
		if lns.HTTP == nil {
			return errors.New("tls: ACME needs the HTTP listener")
		}
		a.tls.mu.Lock()
		a.tls.httpAddr = lns.HTTP.Addr().String()
		a.tls.mu.Unlock()
		if err := src.acme.Start(lns.HTTP.Addr().String()); err != nil {
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
	src := ts.cur.Load()
	if src == nil {
		return out
	}
	if src.files != nil {
		if c := src.files.Certificate(); c != nil {
			leaf := c.Leaf
			if leaf == nil && len(c.Certificate) > 0 {
				leaf, _ = x509.ParseCertificate(c.Certificate[0])
			}
			if leaf != nil {
				leafExpiries(leaf, out)
			}
		}
	}
	if src.acme != nil {
		for _, leaf := range src.acme.Leaves() {
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
