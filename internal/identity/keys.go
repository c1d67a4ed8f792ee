package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// maxKeySetBytes caps a JWK Set file or answer.
const maxKeySetBytes = 1 << 20

// fileCheckInterval is how often a JWK Set file is read again.
const fileCheckInterval = time.Second

// key is one verification key.
type key struct {
	kid string
	alg string // the JWK's own "alg"; "" fits any algorithm of its type
	pub any    // *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey or []byte
}

// keySet is an immutable set of keys. gen changes whenever the keys do, so
// that cached verdicts of an older set are not used.
type keySet struct {
	gen       uint64
	keys      []key
	sum       [sha256.Size]byte // of the source bytes, to tell a change
	ignoreKid bool              // the HMAC secret: every token is tried with it
}

var emptySet = &keySet{}

// candidates returns the keys to try for a token with this kid and alg: the
// keys named kid whose type fits alg, or, without kid, every key that fits.
func (s *keySet) candidates(kid, alg string) []*key {
	var out []*key
	for i := range s.keys {
		k := &s.keys[i]
		if kid != "" && !s.ignoreKid && k.kid != kid {
			continue
		}
		if fits(alg, k) {
			out = append(out, k)
		}
	}
	return out
}

// fits reports whether a token signed with alg may be verified with k.
func fits(alg string, k *key) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch p := k.pub.(type) {
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		name := p.Curve.Params().Name
		return alg == "ES256" && name == "P-256" || alg == "ES384" && name == "P-384" || alg == "ES512" && name == "P-521"
	case ed25519.PublicKey:
		return alg == "EdDSA"
	case []byte:
		return IsHMAC(alg)
	}
	return false
}

// parseKeySet reads a JWK Set (RFC 7517 §5). Keys that cannot verify a
// signature (unknown types, "use": "enc", symmetric keys) are skipped; the
// public half of a private key is used. A set without a usable key is an
// error.
func parseKeySet(b []byte) ([]key, error) {
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	var keys []key
	for _, r := range raw.Keys {
		var jwk jose.JSONWebKey
		if err := jwk.UnmarshalJSON(r); err != nil || jwk.Use == "enc" {
			continue
		}
		var pub any
		switch k := jwk.Key.(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey, ed25519.PublicKey:
			pub = k
		case *rsa.PrivateKey:
			pub = &k.PublicKey
		case *ecdsa.PrivateKey:
			pub = &k.PublicKey
		case ed25519.PrivateKey:
			pub = k.Public()
		default:
			continue
		}
		keys = append(keys, key{kid: jwk.KeyID, alg: jwk.Algorithm, pub: pub})
	}
	if len(keys) == 0 {
		return nil, errors.New("the JWK Set has no usable signature key")
	}
	return keys, nil
}

// keySource provides the key set in force.
type keySource interface {
	// current returns the keys in force (never nil), checking for a change
	// when one is due.
	current(ctx context.Context, now time.Time) *keySet
	// refresh is called for a token whose kid is unknown, or when no keys
	// were ever loaded: it looks for new keys if the source's rate bound
	// allows, waits a bounded time (and within ctx) for a look-up in
	// flight, and returns the keys then in force. done is false when it
	// gave up waiting: a look-up is still running, so a token the keys do
	// not fit could not be checked.
	refresh(ctx context.Context, now time.Time) (set *keySet, done bool)
	stats() *keyStats
	close()
}

// staticKeys is an HMAC secret.
type staticKeys struct {
	set *keySet
	st  keyStats
}

func newStaticKeys(secret []byte) *staticKeys {
	return &staticKeys{set: &keySet{gen: 1, keys: []key{{pub: bytes.Clone(secret)}}, ignoreKid: true}}
}

func (s *staticKeys) current(context.Context, time.Time) *keySet         { return s.set }
func (s *staticKeys) refresh(context.Context, time.Time) (*keySet, bool) { return s.set, true }
func (s *staticKeys) stats() *keyStats                                   { return &s.st }
func (s *staticKeys) close()                                             {}

// fileKeys is a JWK Set file, read again at most once per
// fileCheckInterval, on the request path (no goroutine, no watcher: a
// Kubernetes ConfigMap's symlink swap and an editor's rename are seen
// alike). A read that fails or a file that does not parse keeps the keys in
// force.
type fileKeys struct {
	path string
	log  *slog.Logger
	set  atomic.Pointer[keySet]
	next atomic.Int64 // unix nanos from which a check is due
	mu   sync.Mutex   // serializes checks
	st   keyStats
}

func newFileKeys(path string, now func() time.Time, log *slog.Logger) (*fileKeys, error) {
	f := &fileKeys{path: path, log: log.With("jwks_file", path)}
	f.set.Store(emptySet)
	if err := f.load(); err != nil {
		return nil, fmt.Errorf("identity: jwks_file %s: %w", path, err)
	}
	f.next.Store(now().Add(fileCheckInterval).UnixNano())
	return f, nil
}

// load reads the file and installs its keys when they changed.
func (f *fileKeys) load() error {
	b, err := readCapped(f.path)
	if err == nil {
		err = installKeys(&f.set, &f.st, f.log, b, "identity: JWK Set loaded")
	}
	if err != nil {
		f.st.errors.Add(1)
	}
	return err
}

func readCapped(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	return readKeySet(fh)
}

// readKeySet reads a JWK Set of at most maxKeySetBytes from r.
func readKeySet(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxKeySetBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxKeySetBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxKeySetBytes)
	}
	return b, nil
}

// installKeys counts a load of the JWK Set b and installs its keys in set
// when they changed, logging msg.
func installKeys(set *atomic.Pointer[keySet], st *keyStats, log *slog.Logger, b []byte, msg string) error {
	st.loads.Add(1)
	old := set.Load()
	sum := sha256.Sum256(b)
	if sum == old.sum && old.gen != 0 {
		return nil
	}
	keys, err := parseKeySet(b)
	if err != nil {
		return err
	}
	set.Store(&keySet{gen: old.gen + 1, keys: keys, sum: sum})
	log.Info(msg, "keys", len(keys), "kids", kids(keys))
	return nil
}

func (f *fileKeys) current(_ context.Context, now time.Time) *keySet {
	if n := now.UnixNano(); n >= f.next.Load() && f.mu.TryLock() {
		if n >= f.next.Load() {
			if err := f.load(); err != nil {
				f.log.Error("identity: JWK Set not reloaded; the keys in force are kept", "err", err)
			}
			f.next.Store(now.Add(fileCheckInterval).UnixNano())
		}
		f.mu.Unlock()
	}
	return f.set.Load()
}

// refresh is current: a file is cheap to check, and checked at most once
// per interval anyway.
func (f *fileKeys) refresh(ctx context.Context, now time.Time) (*keySet, bool) {
	return f.current(ctx, now), true
}
func (f *fileKeys) stats() *keyStats { return &f.st }
func (f *fileKeys) close()           {}

// urlKeys is a JWK Set URL. At start a goroutine fetches it until a key set
// is loaded, waiting a short backoff between failed attempts (loadBackoff:
// 200ms doubling to 5s), never the MinRefreshInterval: an IdP that was down
// for a moment at start costs seconds, not a refresh interval. Once keys
// are loaded it is fetched again in the background once RefreshInterval
// has passed since the last success (on the first request after it), and
// on demand for a token whose kid is unknown; each of those waits
// MinRefreshInterval after the previous attempt, so random kids cannot
// cause more than one fetch per interval. One fetch runs at a time, and
// every request that needs it shares it (single flight), waiting at most
// FetchWait for it. A failed fetch keeps the keys in force.
type urlKeys struct {
	url          string
	client       *http.Client
	ownTransport *http.Transport // closed by close; nil with a caller's client
	now          func() time.Time
	log          *slog.Logger
	every, min   time.Duration
	wait         time.Duration                   // the longest a request waits for a fetch
	backoff      func(attempt int) time.Duration // between the first fetches

	set atomic.Pointer[keySet]
	due atomic.Int64 // unix nanos from which a background refresh is due

	mu          sync.Mutex // protects fetchedAt, lastAttempt, inflight, closed
	fetchedAt   time.Time
	lastAttempt time.Time
	inflight    chan struct{} // closed when the running fetch ends
	closed      bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	st     keyStats
}

// Defaults of the JWK Set URL's timing (see [JWTOptions]).
const (
	defaultFetchWait       = time.Second
	defaultFetchTimeout    = 10 * time.Second
	firstLoadBackoff       = 200 * time.Millisecond
	maxLoadBackoff         = 5 * time.Second
	defaultRefreshInterval = time.Hour
	defaultMinRefresh      = 30 * time.Second
)

// loadBackoff is the default wait after the attempt-th failed fetch (from
// 0) while no key set was ever loaded: 200ms doubling to 5s, each drawn
// from its upper half so that replicas started together spread out.
func loadBackoff(attempt int) time.Duration {
	d := maxLoadBackoff
	if attempt < 5 {
		d = min(firstLoadBackoff<<attempt, maxLoadBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

func newURLKeys(o JWTOptions, now func() time.Time, log *slog.Logger) (*urlKeys, error) {
	if !strings.HasPrefix(o.JWKSURL, "https://") && !strings.HasPrefix(o.JWKSURL, "http://") {
		return nil, fmt.Errorf("identity: jwks_url %q: want an http or https URL", o.JWKSURL)
	}
	u := &urlKeys{url: o.JWKSURL, client: o.HTTPClient, now: now, log: log.With("jwks_url", o.JWKSURL),
		every: o.RefreshInterval, min: o.MinRefreshInterval, wait: o.FetchWait, backoff: o.LoadBackoff}
	if u.every <= 0 {
		u.every = defaultRefreshInterval
	}
	if u.min <= 0 {
		u.min = defaultMinRefresh
	}
	if u.wait <= 0 {
		u.wait = defaultFetchWait
	}
	if u.backoff == nil {
		u.backoff = loadBackoff
	}
	if u.client == nil {
		u.ownTransport = http.DefaultTransport.(*http.Transport).Clone()
		u.client = &http.Client{Timeout: defaultFetchTimeout, Transport: u.ownTransport}
	}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	u.set.Store(emptySet)
	u.mu.Lock()
	u.startLocked(now()) // in flight before New returns: the first tokens wait for it
	first := u.inflight
	u.mu.Unlock()
	u.wg.Add(1)
	go u.loadFirst(first)
	return u, nil
}

// loadFirst waits for the first fetch, ch, then fetches again after
// loadBackoff until a key set loads (or close). Requests never start a
// fetch while no keys are loaded: they share these.
func (u *urlKeys) loadFirst(ch chan struct{}) {
	defer u.wg.Done()
	for attempt := 0; ; attempt++ {
		select {
		case <-ch:
		case <-u.ctx.Done():
			return
		}
		if u.set.Load().gen != 0 {
			return
		}
		t := time.NewTimer(u.backoff(attempt))
		select {
		case <-t.C:
		case <-u.ctx.Done():
			t.Stop()
			return
		}
		u.mu.Lock()
		if u.inflight == nil && u.set.Load().gen == 0 {
			u.startLocked(u.now())
		}
		ch = u.inflight
		u.mu.Unlock()
		if ch == nil {
			return // closed, or loaded meanwhile
		}
	}
}

// startLocked starts a fetch. u.mu must be held and no fetch running.
func (u *urlKeys) startLocked(now time.Time) {
	if u.closed {
		return
	}
	u.lastAttempt = now
	u.due.Store(now.Add(u.min).UnixNano())
	ch := make(chan struct{})
	u.inflight = ch
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer close(ch)
		err := u.fetch()
		u.mu.Lock()
		defer u.mu.Unlock()
		u.inflight = nil
		if err != nil {
			u.st.errors.Add(1)
			u.log.Error("identity: JWK Set not fetched; the keys in force are kept", "err", err, "keys_loaded", u.set.Load().gen != 0)
			return
		}
		u.fetchedAt = u.now()
		u.due.Store(max(u.fetchedAt.Add(u.every).UnixNano(), u.lastAttempt.Add(u.min).UnixNano()))
	}()
}

func (u *urlKeys) fetch() error {
	req, err := http.NewRequestWithContext(u.ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := u.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	b, err := readKeySet(resp.Body)
	if err != nil {
		return err
	}
	return installKeys(&u.set, &u.st, u.log, b, "identity: JWK Set fetched")
}

// current returns the keys in force without waiting (none, before the
// first load: refresh waits for it), and starts a background refresh when
// one is due.
func (u *urlKeys) current(_ context.Context, now time.Time) *keySet {
	s := u.set.Load()
	if s.gen != 0 && now.UnixNano() >= u.due.Load() {
		u.mu.Lock()
		if u.inflight == nil && now.Sub(u.fetchedAt) >= u.every && now.Sub(u.lastAttempt) >= u.min {
			u.startLocked(now)
		}
		u.mu.Unlock()
	}
	return s
}

// refresh starts a fetch for an unknown kid when MinRefreshInterval allows
// (before the first load, loadFirst alone fetches), then waits for the
// fetch in flight, if any, at most u.wait.
func (u *urlKeys) refresh(ctx context.Context, now time.Time) (*keySet, bool) {
	u.mu.Lock()
	if u.inflight == nil && u.set.Load().gen != 0 && now.Sub(u.lastAttempt) >= u.min {
		u.startLocked(now)
	}
	ch := u.inflight
	u.mu.Unlock()
	if ch == nil {
		return u.set.Load(), true
	}
	t := time.NewTimer(u.wait)
	defer t.Stop()
	select {
	case <-ch:
		return u.set.Load(), true
	case <-t.C:
	case <-ctx.Done():
	}
	return u.set.Load(), false
}

func (u *urlKeys) stats() *keyStats { return &u.st }

func (u *urlKeys) close() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.cancel()
	u.wg.Wait()
	if u.ownTransport != nil {
		u.ownTransport.CloseIdleConnections()
	}
}

// kids lists key ids for logs (they are public).
func kids(keys []key) []string {
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k.kid)
	}
	return slices.Compact(out)
}
