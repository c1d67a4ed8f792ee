package tlsconf

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/idemgate/idemgate/internal/filewatch"
)

// Defaults of [FilesOptions].
const (
	DefaultPollInterval = 30 * time.Second
	DefaultDebounce     = 250 * time.Millisecond
)

// ErrExpired is returned (wrapped) when a certificate pair on disk has
// expired.
var ErrExpired = errors.New("tlsconf: certificate has expired")

// FilesOptions configure [NewFiles].
type FilesOptions struct {
	// CertFile is the PEM certificate chain, leaf first; KeyFile is its PEM
	// private key. Both are required. They may be symlinks (a Kubernetes
	// Secret volume makes them links through "..data").
	CertFile, KeyFile string
	// PollInterval is how often the files are read and hashed even when no
	// change was noticed, so that a missed event (or a mount that sends
	// none) is caught. Default [DefaultPollInterval].
	PollInterval time.Duration
	// Debounce is how long the watcher waits after the last change in a
	// watched directory before it reloads, so that a cert and a key written
	// one after the other are read together. Default [DefaultDebounce].
	Debounce time.Duration
	// Logger receives one line per reload and per refused pair. Default:
	// discard.
	Logger *slog.Logger
	// OnReload, when set, is called after each attempt to load changed
	// files, with nil when the new pair is now served, else why it was
	// refused (the old pair keeps serving). It runs on the caller of
	// [Files.Reload] or on the watcher goroutine, and must not block.
	OnReload func(err error)
	// NoWatch turns the fsnotify watch off: changes are then noticed by
	// polling (and Reload) only. For file systems without inotify.
	NoWatch bool
	// Now is the clock for the expiry check. Default time.Now.
	Now func() time.Time
}

// Files serves a certificate pair read from files and reloads it when the
// files change, without a restart and without touching established
// connections: new handshakes get the new pair through
// [Files.GetCertificate].
//
// Changes are noticed three ways: an fsnotify watch on the directories
// holding the files and their symlink targets (which sees a Kubernetes
// Secret's atomic "..data" swap as well as a file written in place), a
// content hash every [FilesOptions.PollInterval], and [Files.Reload]. A new
// pair that does not parse, whose key does not match its certificate, or
// whose certificate has expired is refused with one log line and the old
// pair keeps serving; the same bad content is not logged again.
//
// A Files is safe for concurrent use. Its goroutine runs until
// [Files.Close].
type Files struct {
	opts FilesOptions
	log  *slog.Logger

	cur atomic.Pointer[tls.Certificate]

	mu       sync.Mutex // protects served, rejected; serializes reloads
	served   [sha256.Size]byte
	rejected [sha256.Size]byte

	watcher   *fsnotify.Watcher // nil when fsnotify is unavailable
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewFiles loads the pair and starts watching it. It fails when the pair
// cannot be loaded now: idemgate does not start without a certificate. If
// fsnotify cannot watch (inotify limits), it logs a warning and relies on
// polling.
func NewFiles(opts FilesOptions) (*Files, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, errors.New("tlsconf: both a certificate file and a key file are required")
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.Debounce <= 0 {
		opts.Debounce = DefaultDebounce
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	f := &Files{
		opts: opts,
		log:  opts.Logger,
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	cert, sum, err := f.read()
	if err != nil {
		return nil, err
	}
	f.cur.Store(cert)
	f.served = sum
	if !opts.NoWatch {
		if w, err := fsnotify.NewWatcher(); err != nil {
			f.log.Warn("tls: cannot watch the certificate files; polling only", "error", err, "poll_interval", opts.PollInterval.String())
		} else {
			f.watcher = w
			f.watchDirs()
		}
	}
	go f.run()
	return f, nil
}

// GetCertificate returns the pair being served; it is a
// tls.Config.GetCertificate.
func (f *Files) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return f.cur.Load(), nil
}

// Certificate returns the pair being served.
func (f *Files) Certificate() *tls.Certificate { return f.cur.Load() }

// Paths returns the certificate and key files it serves (FilesOptions).
func (f *Files) Paths() (certFile, keyFile string) { return f.opts.CertFile, f.opts.KeyFile }

// TLSConfig returns a [ServerConfig] serving the files' pair.
func (f *Files) TLSConfig() *tls.Config { return ServerConfig(f.GetCertificate) }

// Reload reads the files now and serves them if they changed and are
// valid. It returns nil when nothing changed or the new pair is served,
// and the reason when a changed pair was refused.
func (f *Files) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	cert, sum, err := f.read()
	if sum == f.served && err == nil {
		return nil
	}
	if err != nil {
		if sum != ([sha256.Size]byte{}) && sum == f.rejected {
			return err // refused and logged already
		}
		f.rejected = sum
		old := f.cur.Load().Leaf
		f.log.Error("tls: refused the new certificate pair; the old one keeps serving",
			"cert_file", f.opts.CertFile, "key_file", f.opts.KeyFile, "error", err,
			"serving_serial", old.SerialNumber.Text(16), "serving_not_after", old.NotAfter.UTC())
		f.notify(err)
		return err
	}
	f.cur.Store(cert)
	f.served = sum
	f.rejected = [sha256.Size]byte{}
	f.log.Info("tls: certificate reloaded", "cert_file", f.opts.CertFile,
		"names", leafNames(cert.Leaf), "serial", cert.Leaf.SerialNumber.Text(16), "not_after", cert.Leaf.NotAfter.UTC())
	f.notify(nil)
	f.watchDirs() // a new symlink target may live in a new directory
	return nil
}

// Close stops watching. The pair being served stays available. Close is
// idempotent and safe to call concurrently.
func (f *Files) Close() error {
	f.closeOnce.Do(func() {
		close(f.stop)
		<-f.done
		if f.watcher != nil {
			f.watcher.Close()
		}
	})
	return nil
}

func (f *Files) notify(err error) {
	if f.opts.OnReload != nil {
		f.opts.OnReload(err)
	}
}

func (f *Files) run() {
	defer close(f.done)
	filewatch.Loop{
		Watcher:  f.watcher,
		Debounce: f.opts.Debounce,
		Poll:     f.opts.PollInterval,
		Changed:  func(bool) { f.Reload() },
		Error:    func(err error) { f.log.Warn("tls: watching the certificate files", "error", err) },
	}.Run(f.stop)
}

// watchDirs watches the directories holding the files and their resolved
// targets. Adding a watched directory again is a no-op; fsnotify drops the
// watch of a directory that is removed (an old Kubernetes "..<timestamp>").
func (f *Files) watchDirs() {
	if f.watcher == nil {
		return
	}
	for _, p := range []string{f.opts.CertFile, f.opts.KeyFile} {
		dirs := []string{filepath.Dir(p)}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(r))
		}
		for _, d := range dirs {
			if err := f.watcher.Add(d); err != nil {
				f.log.Warn("tls: cannot watch directory; polling covers it", "dir", d, "error", err)
			}
		}
	}
}

// read loads and checks the pair. The hash covers both files' bytes; it is
// set whenever both files were read, even when the pair is refused.
func (f *Files) read() (*tls.Certificate, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	certPEM, err := os.ReadFile(f.opts.CertFile)
	if err != nil {
		return nil, sum, fmt.Errorf("tlsconf: %w", err)
	}
	keyPEM, err := os.ReadFile(f.opts.KeyFile)
	if err != nil {
		return nil, sum, fmt.Errorf("tlsconf: %w", err)
	}
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	copy(sum[:], h.Sum(nil))
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, sum, fmt.Errorf("tlsconf: %s, %s: %w", f.opts.CertFile, f.opts.KeyFile, err)
	}
	if cert.Leaf == nil { // X509KeyPair sets it since Go 1.23
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, sum, fmt.Errorf("tlsconf: %s: %w", f.opts.CertFile, err)
		}
	}
	if now := f.opts.Now(); now.After(cert.Leaf.NotAfter) {
		return nil, sum, fmt.Errorf("%w: %s expired at %s", ErrExpired, f.opts.CertFile, cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &cert, sum, nil
}

func leafNames(c *x509.Certificate) []string {
	names := append([]string(nil), c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 && c.Subject.CommonName != "" {
		names = append(names, c.Subject.CommonName)
	}
	return names
}
