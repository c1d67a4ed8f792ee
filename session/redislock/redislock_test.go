package redislock

// These tests run against a real Redis: IDEMGATE_TEST_REDIS_ADDR (and, for
// the Cluster case, IDEMGATE_TEST_REDIS_CLUSTER_ADDRS), as started by
// scripts/redis-test.sh. Without it they skip, unless
// IDEMGATE_REQUIRE_REDIS=1. Real clocks here: every wait is bounded, and
// no assertion is exact to the millisecond.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/session"
)

func TestMain(m *testing.M) {
	if os.Getenv("IDEMGATE_LOCK_HELPER") == "1" {
		holdAndHang()
		return
	}
	// The dead-server test would flood go-redis's global logger.
	redis.SetLogger(testutil.DiscardLogger{})
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// redisAddrs returns the addresses of topo, or skips (see redistest).
func redisAddrs(t testing.TB, topo redistest.Topology) []string {
	t.Helper()
	return topo.Find(t).Addrs
}

// newClient returns a client with a 5 s timeout: on a busy machine the
// default 500 ms would make a slow call look like an outage (a fallback).
func newClient(t testing.TB, addrs []string) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: addrs, ClusterMode: len(addrs) > 1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix is a key prefix no other test or run shares.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("idemgate-test:%s:%d:%d:", strings.ReplaceAll(t.Name(), "/", "."), os.Getpid(), time.Now().UnixNano())
}

// newLocker returns a Locker with its own client: one "replica".
func newLocker(t testing.TB, addrs []string, opts Options) *Locker {
	t.Helper()
	l, err := New(newClient(t, addrs), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestMutualExclusion: 2 replicas (own client, own Locker, own Queue),
// 20 sessions, 50 goroutines per session split over the replicas: never
// two holders of one session at once, and each new holder's fencing token
// is larger than the last.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		testMutualExclusion(t, redisAddrs(t, redistest.Standalone))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		testMutualExclusion(t, redisAddrs(t, redistest.Cluster))
	})
}

func testMutualExclusion(t *testing.T, addrs []string) {
	prefix := testPrefix(t)
	var queues [2]*session.Queue
	for i := range queues {
		q, err := session.New(session.Options{
			QueueDepth:   64,
			QueueTimeout: 30 * time.Second,
			Locker:       newLocker(t, addrs, Options{KeyPrefix: prefix}),
		})
		if err != nil {
			t.Fatal(err)
		}
		queues[i] = q
	}
	const sessions, per = 20, 50
	type state struct {
		mu     sync.Mutex // protects active, fence, turns
		active int
		fence  uint64
		turns  int
	}
	var st [sessions]state
	var wg sync.WaitGroup
	start := time.Now()
	for s := range sessions {
		k := session.NewKey(prefix, strconv.Itoa(s))
		for i := range per {
			wg.Go(func() {
				turn, err := queues[i%2].Acquire(t.Context(), k)
				if err != nil {
					t.Errorf("session %d: Acquire = %v", s, err)
					return
				}
				x := &st[s]
				x.mu.Lock()
				x.active++
				if x.active != 1 {
					t.Errorf("session %d: %d holders at once", s, x.active)
				}
				if f := turn.Fence(); f <= x.fence {
					t.Errorf("session %d: fence %d after %d; want it to grow", s, f, x.fence)
				} else {
					x.fence = f
				}
				x.turns++
				x.mu.Unlock()
				// Hold the turn across a scheduling point.
				<-time.After(100 * time.Microsecond)
				x.mu.Lock()
				x.active--
				x.mu.Unlock()
				turn.End()
			})
		}
	}
	wg.Wait()
	for s := range st {
		if st[s].turns != per {
			t.Errorf("session %d: %d turns; want %d", s, st[s].turns, per)
		}
	}
	t.Logf("%d turns over %d sessions and 2 replicas in %v", sessions*per, sessions, time.Since(start))
}

// TestReleaseWakesWaiter: with polling nearly off (5 s), the holder's
// release wakes the other replica's waiter through pub/sub.
func TestReleaseWakesWaiter(t *testing.T) {
	t.Parallel()
	addrs := redisAddrs(t, redistest.Standalone)
	prefix := testPrefix(t)
	opts := Options{KeyPrefix: prefix, PollInterval: 5 * time.Second, NextTTL: 20 * time.Second}
	a, b := newLocker(t, addrs, opts), newLocker(t, addrs, opts)
	k := session.NewKey("wake")
	held, err := a.Lock(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Let b's subscription settle: its first poll is ≥ 2.5 s away, so the
	// first attempt after subscribing must come from a message.
	c := newClient(t, addrs)
	testutil.Eventually(t, 5*time.Second, "b's subscription is not active", func() bool {
		n, err := c.PubSubNumSub(t.Context(), b.channel).Result()
		return err == nil && n[b.channel] >= 2
	})
	// b's second failed attempt is made after it listens for releases:
	// from then on only a message (or a poll ≥ 2.5 s away) wakes it.
	attempts := make(chan struct{}, 2)
	b.attempted = func() {
		select {
		case attempts <- struct{}{}:
		default:
		}
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(t.Context(), k, nil)
		if err == nil {
			l.Unlock()
		}
		got <- err
	}()
	<-attempts
	<-attempts
	released := time.Now()
	held.Unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("b.Lock = %v", err)
		}
		d := time.Since(released)
		t.Logf("woken %v after the release", d)
		if d >= 2*time.Second {
			t.Errorf("woken %v after the release; want well under the 2.5 s minimum poll", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b never got the lock")
	}
}

// TestNextTurnGoesToOtherReplica: a waiter of replica b claims the next
// turn, so when a releases and asks again at once, b goes first.
func TestNextTurnGoesToOtherReplica(t *testing.T) {
	t.Parallel()
	addrs := redisAddrs(t, redistest.Standalone)
	prefix := testPrefix(t)
	a, b := newLocker(t, addrs, Options{KeyPrefix: prefix}), newLocker(t, addrs, Options{KeyPrefix: prefix})
	k := session.NewKey("fair")
	held, err := a.Lock(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var mu sync.Mutex
	bWaiting := make(chan struct{})
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		l, err := b.Lock(t.Context(), k, func() { close(bWaiting) })
		if err != nil {
			t.Errorf("b.Lock = %v", err)
			return
		}
		mu.Lock()
		order = append(order, "b")
		mu.Unlock()
		<-time.After(20 * time.Millisecond)
		l.Unlock()
	}()
	<-bWaiting
	held.Unlock()
	aWaited := false
	l, err := a.Lock(t.Context(), k, func() { aWaited = true })
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	order = append(order, "a")
	mu.Unlock()
	l.Unlock()
	<-bDone
	if fmt.Sprint(order) != "[b a]" || !aWaited {
		t.Errorf("order = %v, a waited %v; want [b a], true", order, aWaited)
	}
}

// TestAbandonedLockExpires: a holder in another process is killed with
// SIGKILL while it holds (and renews) a lock with a 1 s lease. Until the
// kill the lock outlives its lease; after it, the lock ends with the lease
// and a waiter takes it with a larger fencing token.
func TestAbandonedLockExpires(t *testing.T) {
	t.Parallel()
	addrs := redisAddrs(t, redistest.Standalone)
	prefix := testPrefix(t)
	const lease = time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDEMGATE_LOCK_HELPER=1",
		"IDEMGATE_LOCK_HELPER_ADDR="+addrs[0], "IDEMGATE_LOCK_HELPER_PREFIX="+prefix,
		"IDEMGATE_LOCK_HELPER_LEASE="+lease.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		if s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	var helperFence uint64
	select {
	case line := <-lines:
		f, ok := strings.CutPrefix(line, "locked ")
		if helperFence, err = strconv.ParseUint(f, 10, 64); !ok || err != nil {
			t.Fatalf("helper said %q; want \"locked FENCE\"", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("helper did not take the lock within 10s")
	}

	w := newLocker(t, addrs, Options{KeyPrefix: prefix})
	k := session.NewKey("abandoned")
	// While the helper lives, it renews: the lock outlives 2 leases.
	ctx, cancel := context.WithTimeout(t.Context(), 2*lease)
	_, err = w.Lock(ctx, k, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while the holder lives = %v; want it to wait out its 2 s deadline", err)
	}

	if err := cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel = context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	l, err := w.Lock(ctx, k, nil)
	if err != nil {
		t.Fatalf("Lock after the kill = %v; want the lock once its lease ended", err)
	}
	defer l.Unlock()
	d := time.Since(killed)
	t.Logf("taken %v after SIGKILL (lease %v)", d, lease)
	if d > lease+time.Second {
		t.Errorf("taken %v after the kill; want within the lease (%v) plus one poll", d, lease)
	}
	if l.Fence() <= helperFence {
		t.Errorf("fence %d after the dead holder's %d; want larger", l.Fence(), helperFence)
	}
}

// holdAndHang is the helper process of TestAbandonedLockExpires: it takes
// the lock, says so, and keeps renewing until it is killed.
func holdAndHang() {
	lease, err := time.ParseDuration(os.Getenv("IDEMGATE_LOCK_HELPER_LEASE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{os.Getenv("IDEMGATE_LOCK_HELPER_ADDR")}, Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := New(c, Options{KeyPrefix: os.Getenv("IDEMGATE_LOCK_HELPER_PREFIX"), Lease: lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	held, err := l.Lock(ctx, session.NewKey("abandoned"), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("locked %d\n", held.Fence())
	// Hang until SIGKILL, renewing; give up after a minute in any case.
	<-time.After(time.Minute)
	os.Exit(3)
}

// TestHolderWaitingCountsAsWaiting: while the head of a replica's line
// waits for another replica's lock, it is one of the QueueDepth waiters.
func TestHolderWaitingCountsAsWaiting(t *testing.T) {
	t.Parallel()
	addrs := redisAddrs(t, redistest.Standalone)
	prefix := testPrefix(t)
	other := newLocker(t, addrs, Options{KeyPrefix: prefix})
	var waiting atomic.Int64
	q, err := session.New(session.Options{
		QueueDepth:   2,
		QueueTimeout: 20 * time.Second,
		Locker:       newLocker(t, addrs, Options{KeyPrefix: prefix}),
		Metrics:      waitingGauge{&waiting},
	})
	if err != nil {
		t.Fatal(err)
	}
	k := session.NewKey("depth")
	held, err := other.Lock(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []int
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 1; i <= 2; i++ {
		wg.Go(func() {
			turn, err := q.Acquire(t.Context(), k)
			if err != nil {
				t.Errorf("request %d: Acquire = %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			turn.End()
		})
		testutil.Eventually(t, 5*time.Second, fmt.Sprintf("%d waiting", i), func() error {
			if n := waiting.Load(); n != int64(i) {
				return fmt.Errorf("waiting = %d", n)
			}
			return nil
		})
	}
	// The head (waiting for the lock) and one in line: the line is full.
	if _, err := q.Acquire(t.Context(), k); !errors.Is(err, session.ErrQueueFull) {
		t.Errorf("third Acquire = %v; want ErrQueueFull", err)
	}
	held.Unlock()
	wg.Wait()
	if fmt.Sprint(order) != "[1 2]" {
		t.Errorf("order = %v; want [1 2]", order)
	}
	if n := waiting.Load(); n != 0 {
		t.Errorf("waiting at the end = %d; want 0", n)
	}
}

type waitingGauge struct{ n *atomic.Int64 }

func (g waitingGauge) Waiting(d int)                      { g.n.Add(int64(d)) }
func (waitingGauge) Waited(time.Duration, session.Result) {}
func (waitingGauge) Rejected(session.Result)              {}
func (waitingGauge) Fallback()                            {}

// TestTimeoutWhileWaitingForLock: a head that waits for another replica's
// lock past the queue timeout gets ErrTimeout, and its claim on the next
// turn is cleared, so it does not hold up anyone.
func TestTimeoutWhileWaitingForLock(t *testing.T) {
	t.Parallel()
	addrs := redisAddrs(t, redistest.Standalone)
	prefix := testPrefix(t)
	l := newLocker(t, addrs, Options{KeyPrefix: prefix})
	q, err := session.New(session.Options{QueueDepth: 4, QueueTimeout: 300 * time.Millisecond, Locker: l})
	if err != nil {
		t.Fatal(err)
	}
	k := session.NewKey("timeout")
	held, err := newLocker(t, addrs, Options{KeyPrefix: prefix}).Lock(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock()
	start := time.Now()
	if _, err := q.Acquire(t.Context(), k); !errors.Is(err, session.ErrTimeout) {
		t.Fatalf("Acquire = %v; want ErrTimeout", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 3*time.Second {
		t.Errorf("timed out after %v; want about 300ms", d)
	}
	c := newClient(t, addrs)
	next := l.keys(k).next
	testutil.Eventually(t, 5*time.Second, "the timed-out waiter's next-turn claim is still there", func() bool {
		n, err := c.Exists(t.Context(), next).Result()
		return err == nil && n == 0
	})
	if n := q.Sessions(); n != 0 {
		t.Errorf("sessions left = %d; want 0", n)
	}
}

// TestUnreachableFallsBack: with Redis down, a turn is granted on the local
// queue after one failed call, and the fallback is counted.
func TestUnreachableFallsBack(t *testing.T) {
	t.Parallel()
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{testutil.DeadAddr(t)}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	l, err := New(c, Options{KeyPrefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var fallbacks atomic.Int64
	q, err := session.New(session.Options{QueueDepth: 4, Locker: l, Metrics: fallbackCounter{&fallbacks}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	turn, err := q.Acquire(t.Context(), session.NewKey("down"))
	if err != nil {
		t.Fatalf("Acquire with Redis down = %v; want a local turn", err)
	}
	turn.End()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("fallback took %v; want about one call timeout (200ms)", d)
	}
	if n := fallbacks.Load(); n != 1 {
		t.Errorf("fallbacks = %d; want 1", n)
	}
}

type fallbackCounter struct{ n *atomic.Int64 }

func (fallbackCounter) Waiting(int)                          {}
func (fallbackCounter) Waited(time.Duration, session.Result) {}
func (fallbackCounter) Rejected(session.Result)              {}
func (f fallbackCounter) Fallback()                          { f.n.Add(1) }

// TestRenewalAndLoss: a held lock outlives several leases while renewed;
// when its key is deleted behind its back, the renewal reports the loss.
func TestRenewalAndLoss(t *testing.T) {
	t.Parallel()
	addrs := redisAddrs(t, redistest.Standalone)
	prefix := testPrefix(t)
	const lease = time.Second
	lost := make(chan struct{}, 1)
	l := newLocker(t, addrs, Options{KeyPrefix: prefix, Lease: lease, LockLost: func() { lost <- struct{}{} }})
	k := session.NewKey("renew")
	held, err := l.Lock(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Another replica cannot take it for 2.5 leases.
	other := newLocker(t, addrs, Options{KeyPrefix: prefix, Lease: lease})
	ctx, cancel := context.WithTimeout(t.Context(), 5*lease/2)
	_, err = other.Lock(ctx, k, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("other.Lock while renewed = %v; want DeadlineExceeded", err)
	}
	c := newClient(t, addrs)
	if err := c.Del(t.Context(), l.keys(k).lock).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("the loss was not reported")
	}
	held.Unlock() // compare-and-delete: deletes nothing of anyone else's
}

// TestKeyPrefix refuses braces, which would break the hash tag.
func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := New(c, Options{KeyPrefix: "a{b}:"}); err == nil {
		t.Error("New with a braced prefix = nil error; want an error")
	}
	if _, err := New(c, Options{PollInterval: time.Second, NextTTL: time.Second}); err == nil {
		t.Error("New with NextTTL <= PollInterval = nil error; want an error")
	}
}

// BenchmarkTurnRedis is the cost of an uncontended turn with the Redis
// lock: Acquire (one acquire script) and End (one release script), on
// a local Redis.
func BenchmarkTurnRedis(b *testing.B) {
	addrs := redisAddrs(b, redistest.Standalone)
	l := newLocker(b, addrs, Options{KeyPrefix: testPrefix(b)})
	q, err := session.New(session.Options{QueueDepth: 4, Locker: l})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		k := session.NewKey("bench")
		for b.Loop() {
			turn, err := q.Acquire(ctx, k)
			if err != nil {
				b.Fatal(err)
			}
			turn.End()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var n atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			k := session.NewKey("bench", strconv.FormatInt(n.Add(1), 10))
			for pb.Next() {
				turn, err := q.Acquire(ctx, k)
				if err != nil {
					b.Error(err)
					return
				}
				turn.End()
			}
		})
	})
}

// A release channel refused to the ACL user: a release is still made and
// reported as made (no warning), and the next Lock gets the session at
// once. Before, the refused PUBLISH failed the release script after its
// DEL, and logged "session lock release failed".
func TestReleaseChannelRefused(t *testing.T) {
	t.Parallel()
	_, c := channelsRefused(t)
	var logs testutil.SyncBuffer
	l, err := New(c, Options{KeyPrefix: testPrefix(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	k := session.NewKey("refused")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		held, err := l.Lock(ctx, k, nil)
		cancel()
		if err != nil {
			t.Fatalf("Lock %d after a release = %v; want the session at once", i, err)
		}
		held.Unlock()
	}
	if s := logs.String(); strings.Contains(s, "release failed") {
		t.Errorf("a release made was logged as failed: %s", s)
	}
}

// channelsRefused starts a Redis of the test's own and returns a client of
// its default user and one of a user refused every pub/sub channel.
func channelsRefused(t *testing.T) (admin, refused redis.UniversalClient) {
	t.Helper()
	own := redistest.StartOwn(t)
	admin, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{own.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(t.Context(), "acl", "setuser", "idem", "on", ">pw", "~*", "resetchannels", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	refused, err = redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{own.Addr}, Username: "idem", Password: "pw", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { refused.Close() })
	return admin, refused
}

// A release subscription Redis refuses is logged once (turns then wait
// for their poll); one it confirms logs nothing.
func TestReleaseSubscriptionRefusedLogged(t *testing.T) {
	t.Parallel()
	admin, refused := channelsRefused(t)
	var logs testutil.SyncBuffer
	l, err := New(refused, Options{KeyPrefix: testPrefix(t), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	testutil.Eventually(t, 10*time.Second, "the refusal's warning", func() bool {
		s := logs.String()
		return strings.Contains(s, "the release subscription was refused") && strings.Contains(s, "NOPERM")
	})
	if n := strings.Count(logs.String(), "release subscription"); n != 1 {
		t.Errorf("the refusal was logged %d times; want once:\n%s", n, logs.String())
	}

	// Two replicas whose subscriptions Redis confirms: one's release wakes
	// the other's waiter by message (their poll is a minute away), and
	// neither logs a thing.
	var quiet testutil.SyncBuffer
	prefix := testPrefix(t)
	replica := func() *Locker {
		l, err := New(admin, Options{KeyPrefix: prefix, Lease: time.Minute, PollInterval: time.Minute, NextTTL: 2 * time.Minute,
			Logger: slog.New(slog.NewTextHandler(&quiet, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	a, b := replica(), replica()
	testutil.Eventually(t, 10*time.Second, "both subscriptions", func() bool {
		v, err := admin.PubSubNumSub(t.Context(), a.channel).Result()
		return err == nil && v[a.channel] == 2
	})
	k := session.NewKey("confirmed")
	held, err := a.Lock(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	waiting, got := make(chan struct{}), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		l, err := b.Lock(ctx, k, func() { close(waiting) })
		if err == nil {
			l.Unlock()
		}
		got <- err
	}()
	<-waiting
	held.Unlock()
	if err := <-got; err != nil {
		t.Fatalf("the other replica's waiter was not woken by the release's message: %v", err)
	}
	if s := quiet.String(); s != "" {
		t.Errorf("a confirmed subscription logged %q", s)
	}
}
