package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3"
)

// ACMEOptions configure [NewACME].
type ACMEOptions struct {
	// Domains are obtained (or loaded from Storage) as soon as
	// [ACME.Start] runs, and renewed in the background.
	Domains []string
	// Email is the ACME account's contact address; optional.
	Email string
	// CA is the ACME directory URL. Default: Let's Encrypt production
	// (certmagic.LetsEncryptProductionCA), whose failed attempts certmagic
	// retries against Let's Encrypt staging.
	CA string
	// Roots are the roots trusted for the CA's own https endpoint (a
	// private CA). Nil means the system roots.
	Roots *x509.CertPool
	// OnDemand, when not nil, allows certificates to be obtained during a
	// TLS handshake for the server names it allows (and for Domains). Nil
	// disables on-demand issuance: a handshake for any other name fails.
	OnDemand *AllowList
	// Storage holds certificates, keys, the ACME account and locks.
	// Instances sharing a Storage share certificates, and one of them
	// obtains or renews each (certmagic locks through Storage). Required.
	Storage certmagic.Storage
	// TLSALPN enables the TLS-ALPN-01 challenge. The CA connects to port
	// 443, so enable it only when the TLS listener is on 443. HTTP-01 is
	// always enabled, answered by [ACME.HTTPHandler].
	TLSALPN bool
	// Logger receives certmagic's log, with the attribute "certmagic"
	// naming certmagic's component, and the storage wait warnings.
	// Default: discard.
	Logger *slog.Logger
}

// ACME obtains and renews certificates from an ACME CA with certmagic's
// lower-level API: the caller keeps its own listeners and http.Server,
// serves [ACME.TLSConfig] on the TLS listener and [ACME.HTTPHandler] on
// the HTTP listener (port 80 as the CA sees it).
//
// Domains are managed eagerly; with an allow-list, other names are
// obtained on demand during the first handshake that asks for them. OCSP
// stapling is off (Let's Encrypt ended OCSP in 2025; it also keeps a
// sidecar from calling responders).
//
// Its methods are safe for concurrent use; Start must be called once,
// before the listeners serve, and Close stops the background work.
type ACME struct {
	opts    ACMEOptions
	domains map[string]struct{}
	cache   *certmagic.Cache
	issuers []*certmagic.ACMEIssuer
	log     *slog.Logger

	// cfgMu protects managed and onDemand for the cache's maintenance
	// goroutine, which starts before NewACME sets them; everything else
	// reads them after NewACME returned.
	cfgMu    sync.RWMutex
	managed  *certmagic.Config // Domains, renewed by the cache's maintenance
	onDemand *certmagic.Config // nil without an allow-list; renews in handshakes

	mu      sync.Mutex // protects cancel, started
	cancel  context.CancelFunc
	started bool
	wg      sync.WaitGroup // the manage goroutine
	closed  sync.Once
}

// storageProbeKey is read (and normally missing) to learn whether the
// Storage answers before certificates are managed.
const storageProbeKey = "idemgate_storage_probe"

// NewACME prepares certificate management; nothing is obtained before
// [ACME.Start].
func NewACME(opts ACMEOptions) (*ACME, error) {
	if opts.Storage == nil {
		return nil, errors.New("tlsconf: ACME needs a Storage")
	}
	if len(opts.Domains) == 0 && opts.OnDemand == nil {
		return nil, errors.New("tlsconf: ACME needs domains or an on-demand allow-list")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	zl := newZapLogger(log)
	m := &ACME{opts: opts, domains: map[string]struct{}{}, log: log}
	var names []string
	for _, d := range opts.Domains {
		n := normalizeName(d)
		if _, dup := m.domains[n]; !dup && n != "" {
			m.domains[n] = struct{}{}
			names = append(names, n)
		}
	}
	m.opts.Domains = names
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: m.configForCert,
		Logger:           zl,
	})
	newConfig := func(od *certmagic.OnDemandConfig) *certmagic.Config {
		cfg := certmagic.New(m.cache, certmagic.Config{
			Storage:  opts.Storage,
			Logger:   zl,
			OnDemand: od,
			OCSP:     certmagic.OCSPConfig{DisableStapling: true},
		})
		if len(names) > 0 {
			cfg.DefaultServerName = names[0] // clients without SNI
		}
		iss := certmagic.NewACMEIssuer(cfg, certmagic.ACMEIssuer{
			CA:                      opts.CA,
			Email:                   opts.Email,
			Agreed:                  true,
			TrustedRoots:            opts.Roots,
			DisableTLSALPNChallenge: !opts.TLSALPN,
			Logger:                  zl,
		})
		cfg.Issuers = []certmagic.Issuer{iss}
		m.issuers = append(m.issuers, iss)
		return cfg
	}
	m.cfgMu.Lock()
	defer m.cfgMu.Unlock()
	m.managed = newConfig(nil)
	if opts.OnDemand != nil {
		m.onDemand = newConfig(&certmagic.OnDemandConfig{DecisionFunc: m.decide})
	}
	return m, nil
}

// configForCert tells the cache's maintenance which Config manages a
// certificate: the eager one for Domains, else the on-demand one.
func (m *ACME) configForCert(c certmagic.Certificate) (*certmagic.Config, error) {
	m.cfgMu.RLock()
	defer m.cfgMu.RUnlock()
	if m.onDemand == nil {
		return m.managed, nil
	}
	for _, n := range c.Names {
		if _, ok := m.domains[normalizeName(n)]; ok {
			return m.managed, nil
		}
	}
	return m.onDemand, nil
}

// decide is the on-demand DecisionFunc: Domains and the allow-list.
func (m *ACME) decide(ctx context.Context, name string) error {
	if _, ok := m.domains[normalizeName(name)]; ok {
		return nil
	}
	return m.opts.OnDemand.Decide(ctx, name)
}

// Start begins managing Domains in the background: each is loaded from
// Storage or obtained, then renewed. httpAddr is the address the HTTP
// listener serving [ACME.HTTPHandler] is bound to; certmagic's HTTP-01
// solver finds it taken and relies on that handler instead of binding its
// own. Call Start after that listener is bound and before the listeners
// serve.
//
// Start returns at once. Until Storage answers (Redis may come up after
// idemgate), management waits, retrying every second up to every 30
// seconds with a warning each time; certmagic would otherwise give up on a
// name whose first load failed. Errors from the CA are logged and retried
// with certmagic's backoff, not returned.
func (m *ACME) Start(httpAddr string) error {
	host, port, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return fmt.Errorf("tlsconf: HTTP listener address %q: %w", httpAddr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 {
		return fmt.Errorf("tlsconf: HTTP listener address %q: bad port", httpAddr)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return errors.New("tlsconf: ACME already started")
	}
	m.started = true
	for _, iss := range m.issuers {
		iss.ListenHost, iss.AltHTTPPort = host, p
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	if len(m.opts.Domains) == 0 {
		return nil
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.manage(ctx)
	}()
	return nil
}

// manage waits until Storage answers, then hands Domains to certmagic.
func (m *ACME) manage(ctx context.Context) {
	wait := time.Second
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		_, err := m.opts.Storage.Stat(ctx, storageProbeKey)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			break
		}
		m.log.Warn("tls: certificate storage unavailable; certificates are managed once it answers",
			"error", err, "retry_in", wait.String())
		t.Reset(wait)
		wait = min(2*wait, 30*time.Second)
	}
	if err := m.managed.ManageAsync(ctx, m.opts.Domains); err != nil {
		m.log.Error("tls: managing certificates", "domains", m.opts.Domains, "error", err)
	}
}

// GetCertificate is the TLS listener's tls.Config.GetCertificate: a
// managed or on-demand certificate for the SNI name, or the TLS-ALPN-01
// challenge certificate.
func (m *ACME) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if m.onDemand != nil {
		return m.onDemand.GetCertificate(hello)
	}
	return m.managed.GetCertificate(hello)
}

// TLSConfig returns a [ServerConfig] around [ACME.GetCertificate], which
// also offers "acme-tls/1" when TLS-ALPN-01 is enabled.
func (m *ACME) TLSConfig() *tls.Config {
	if m.opts.TLSALPN {
		return ServerConfig(m.GetCertificate, acmez.ACMETLS1Protocol)
	}
	return ServerConfig(m.GetCertificate)
}

// HTTPHandler answers HTTP-01 challenges, those started by this instance
// and (through the shared Storage) by any other, and passes every other
// request to next.
func (m *ACME) HTTPHandler(next http.Handler) http.Handler {
	return m.issuers[0].HTTPChallengeHandler(next)
}

// Close stops renewals and obtains in progress (certmagic's own
// goroutines end when their context does) and waits for the management
// goroutine. It does not close Storage. Close is idempotent.
func (m *ACME) Close() error {
	m.closed.Do(func() {
		m.mu.Lock()
		if m.cancel != nil {
			m.cancel()
		}
		m.mu.Unlock()
		m.wg.Wait()
		m.cache.Stop()
	})
	return nil
}

// Options returns the options it was made with, its Domains normalized
// (lower-cased, deduplicated).
func (m *ACME) Options() ACMEOptions { return m.opts }

// Leaves returns the leaf certificates the cache holds for the managed
// domains (for their expiry metric); on-demand names are not included.
func (m *ACME) Leaves() []*x509.Certificate {
	var out []*x509.Certificate
	for _, d := range m.opts.Domains {
		for _, c := range m.cache.AllMatchingCertificates(d) {
			if c.Leaf != nil {
				out = append(out, c.Leaf)
			}
		}
	}
	return out
}
