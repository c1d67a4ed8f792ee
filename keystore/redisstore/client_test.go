package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
)

func TestNewClientOptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		opts    ClientOptions
		wantErr bool
		check   func(t *testing.T, c redis.UniversalClient)
	}{
		{name: "no address", opts: ClientOptions{}, wantErr: true},
		{name: "empty address", opts: ClientOptions{Addrs: []string{""}}, wantErr: true},
		{name: "negative timeout", opts: ClientOptions{Addrs: []string{"a:1"}, Timeout: -1}, wantErr: true},
		{name: "cluster db", opts: ClientOptions{Addrs: []string{"a:1", "b:1"}, DB: 1}, wantErr: true},
		{name: "cluster and sentinel", opts: ClientOptions{Addrs: []string{"a:1"}, ClusterMode: true, MasterName: "m"}, wantErr: true},
		{
			name: "standalone",
			opts: ClientOptions{Addrs: []string{"a:1"}, DB: 2, Timeout: 300 * time.Millisecond},
			check: func(t *testing.T, c redis.UniversalClient) {
				cl, ok := c.(*redis.Client)
				if !ok {
					t.Fatalf("client is %T; want *redis.Client", c)
				}
				o := cl.Options()
				d := 300 * time.Millisecond
				if o.Addr != "a:1" || o.DB != 2 || o.DialTimeout != d || o.ReadTimeout != d || o.WriteTimeout != d || o.PoolTimeout != d {
					t.Errorf("addr %s db %d dial %v read %v write %v pool %v; want a:1, 2, %v everywhere",
						o.Addr, o.DB, o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, d)
				}
				if o.MaxRetries != 0 || o.DialerRetries != 1 || !o.ContextTimeoutEnabled {
					t.Errorf("retries %d, dialer retries %d, context timeouts %v; want 0, 1, true", o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled)
				}
			},
		},
		{
			name: "default timeout",
			opts: ClientOptions{Addrs: []string{"a:1"}},
			check: func(t *testing.T, c redis.UniversalClient) {
				if o := c.(*redis.Client).Options(); o.ReadTimeout != DefaultTimeout {
					t.Errorf("read timeout %v; want %v", o.ReadTimeout, DefaultTimeout)
				}
			},
		},
		{
			name: "cluster",
			opts: ClientOptions{Addrs: []string{"a:1", "b:1"}},
			check: func(t *testing.T, c redis.UniversalClient) {
				cl, ok := c.(*redis.ClusterClient)
				if !ok {
					t.Fatalf("client is %T; want *redis.ClusterClient", c)
				}
				if o := cl.Options(); o.MaxRedirects != 1 || o.DialerRetries != 1 || o.ReadTimeout != DefaultTimeout {
					t.Errorf("redirects %d, dialer retries %d, read timeout %v; want 1, 1, %v", o.MaxRedirects, o.DialerRetries, o.ReadTimeout, DefaultTimeout)
				}
			},
		},
		{
			name: "cluster mode, one seed",
			opts: ClientOptions{Addrs: []string{"a:1"}, ClusterMode: true},
			check: func(t *testing.T, c redis.UniversalClient) {
				if _, ok := c.(*redis.ClusterClient); !ok {
					t.Fatalf("client is %T; want *redis.ClusterClient", c)
				}
			},
		},
		{
			name: "sentinel",
			opts: ClientOptions{Addrs: []string{"a:1", "b:1"}, MasterName: "m"},
			check: func(t *testing.T, c redis.UniversalClient) {
				if _, ok := c.(*redis.Client); !ok {
					t.Fatalf("client is %T; want the *redis.Client of a failover client", c)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := NewClient(tc.opts)
			if (err != nil) != tc.wantErr {
				t.Fatalf("NewClient = %v; want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			defer c.Close()
			tc.check(t, c)
		})
	}
}

func TestNewRejectsBadPrefix(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, p := range []string{"a{b}:", "{", "x}"} {
		if _, err := New(c, Options{KeyPrefix: p}); err == nil {
			t.Errorf("New(prefix %q) = nil error; want an error", p)
		}
	}
	if _, err := New(nil, Options{}); err == nil {
		t.Errorf("New(nil client) = nil error; want an error")
	}
	s, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.key(keystore.NewKey("x")); !keyName.MatchString(got[len(DefaultKeyPrefix):]) || got[:len(DefaultKeyPrefix)] != DefaultKeyPrefix {
		t.Errorf("key = %q; want %s{64 hex}", got, DefaultKeyPrefix)
	}
}

func TestGlobEscape(t *testing.T) {
	t.Parallel()
	if got, want := globEscape(`a*b?c[d]e\f:`), `a\*b\?c\[d\]e\\f:`; got != want {
		t.Errorf("globEscape = %q; want %q", got, want)
	}
}

// silentAddr returns an address that accepts connections, reads what it
// is sent and never answers.
func silentAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex // protects conns
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// Redis down or hung: every call fails with a non-sentinel error (the proxy
// answers 503) within a bounded time, never hangs.
func TestUnreachable(t *testing.T) {
	t.Parallel()
	const timeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) []string
		opts  ClientOptions
		max   time.Duration
	}{
		// Connection refused needs no timeout at all; 2 × timeout is the bound.
		{"dead standalone", func(t *testing.T) []string { return []string{testutil.DeadAddr(t)} }, ClientOptions{}, 2 * timeout},
		{"dead cluster", func(t *testing.T) []string { return []string{testutil.DeadAddr(t), testutil.DeadAddr(t)} }, ClientOptions{}, 2 * timeout},
		{"dead sentinels", func(t *testing.T) []string { return []string{testutil.DeadAddr(t), testutil.DeadAddr(t)} }, ClientOptions{MasterName: "m"}, 2 * timeout},
		// A silent server costs one read timeout; a Cluster may resend once
		// (MaxRedirects 1) after its topology query timed out.
		{"silent standalone", func(t *testing.T) []string { return []string{silentAddr(t)} }, ClientOptions{}, 2 * timeout},
		{"silent cluster", func(t *testing.T) []string { return []string{silentAddr(t), silentAddr(t)} }, ClientOptions{}, 4 * timeout},
		{"silent sentinels", func(t *testing.T) []string { return []string{silentAddr(t), silentAddr(t)} }, ClientOptions{MasterName: "m"}, 2 * timeout},
	} {
		for _, live := range []bool{false, true} {
			name := tc.name
			if live {
				name += " live timeout"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				o := tc.opts
				o.Addrs = tc.addrs(t)
				var sopts Options
				if live {
					// Made with another value, then set: the bound is
					// the one in force when a call starts.
					o.LiveTimeout = NewTimeout(time.Minute)
					o.LiveTimeout.Set(timeout)
					sopts.Timeout = o.LiveTimeout
				} else {
					o.Timeout = timeout
				}
				unreachable(t, o, sopts, tc.max, timeout)
			})
		}
	}
}

// unreachable makes calls through a client made with o and a store made
// with sopts, and checks that each fails with a connection error within max.
func unreachable(t *testing.T, o ClientOptions, sopts Options, max, timeout time.Duration) {
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := New(c, sopts)
	if err != nil {
		t.Fatal(err)
	}
	k := keystore.NewKey("unreachable")
	calls := []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"Reserve", func(ctx context.Context) error { _, err := s.Reserve(ctx, k, reserveOpts("a")); return err }},
		{"Complete", func(ctx context.Context) error { return s.Complete(ctx, k, 1, &keystore.Response{Status: 200}) }},
		{"Get", func(ctx context.Context) error { _, err := s.Get(ctx, k); return err }},
	}
	for _, call := range calls {
		start := time.Now()
		err := call.fn(context.Background())
		took := time.Since(start)
		if err == nil || isSentinel(err) {
			t.Errorf("%s = %v; want a connection error", call.name, err)
		}
		if took > max+100*time.Millisecond {
			t.Errorf("%s took %v; want at most %v (timeout %v)", call.name, took, max, timeout)
		}
		t.Logf("%s: %v after %v", call.name, err, took.Round(time.Millisecond))
	}
}

// A live timeout (store.redis.timeout, reloaded) bounds the calls that
// start after it is set, lowered or raised past the value the client was
// made with, in every topology: the wait on a silent server follows it.
func TestLiveTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) []string
		opts  ClientOptions
		calls int // read timeouts one call may cost (a Cluster resends once)
	}{
		{"standalone", func(t *testing.T) []string { return []string{silentAddr(t)} }, ClientOptions{}, 1},
		{"cluster", func(t *testing.T) []string { return []string{silentAddr(t), silentAddr(t)} }, ClientOptions{}, 2},
		{"sentinels", func(t *testing.T) []string { return []string{silentAddr(t), silentAddr(t)} }, ClientOptions{MasterName: "m"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.opts
			o.Addrs = tc.addrs(t)
			o.LiveTimeout = NewTimeout(300 * time.Millisecond)
			c, err := NewClient(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := New(c, Options{Timeout: o.LiveTimeout})
			if err != nil {
				t.Fatal(err)
			}
			k := keystore.NewKey("live-timeout")
			for _, d := range []time.Duration{100 * time.Millisecond, 900 * time.Millisecond, 150 * time.Millisecond} {
				o.LiveTimeout.Set(d)
				start := time.Now()
				_, err := s.Get(context.Background(), k)
				took := time.Since(start)
				if err == nil || isSentinel(err) {
					t.Fatalf("Get = %v; want a timeout", err)
				}
				// At least one bound (the first read, or the first
				// topology query, waits it whole), at most the calls
				// it may cost, with slack for a loaded machine.
				if lo, hi := d-20*time.Millisecond, time.Duration(tc.calls)*d+300*time.Millisecond; took < lo || took > hi {
					t.Errorf("timeout %v: Get failed after %v; want %v–%v", d, took, lo, hi)
				}
				t.Logf("timeout %v: %v after %v", d, err, took.Round(time.Millisecond))
			}
		})
	}
}

// The caller's deadline bounds a call even when it is shorter than Timeout
// (ContextTimeoutEnabled).
func TestContextDeadline(t *testing.T) {
	t.Parallel()
	c, err := NewClient(ClientOptions{Addrs: []string{silentAddr(t)}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _ := New(c, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Reserve(ctx, keystore.NewKey("deadline"), reserveOpts("a"))
	if took := time.Since(start); err == nil || took > time.Second {
		t.Errorf("Reserve with a 150ms deadline = %v after %v; want an error within about 150ms", err, took)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Errorf("Reserve = %v; want a deadline or timeout error", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isSentinel(err error) bool {
	for _, s := range []error{keystore.ErrNotFound, keystore.ErrInFlight, keystore.ErrFingerprintMismatch, keystore.ErrLeaseLost, keystore.ErrFull, keystore.ErrClosed, ErrCorrupt} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func TestWrapErr(t *testing.T) {
	t.Parallel()
	oom := errors.New("OOM command not allowed when used memory > 'maxmemory'.")
	if err := wrapErr("reserve", oom); !errors.Is(err, keystore.ErrFull) || !errors.Is(err, oom) {
		t.Errorf("wrapErr(OOM) = %v; want ErrFull wrapping the Redis error", err)
	}
	if err := wrapErr("reserve", context.DeadlineExceeded); isSentinel(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wrapErr(deadline) = %v; want the deadline error, no sentinel", err)
	}
}
