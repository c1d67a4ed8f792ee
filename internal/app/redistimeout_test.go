package app

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// store.redis.timeout reloads live (DESIGN.md, Config): under a load of
// keyed writes on Redis, a reload lowers it and another raises it past the
// value the app started with; no request fails, and a keyed write sent
// next while Redis is stopped gets 503 after the new timeout, not the old.
func TestReloadRedisTimeoutE2E(t *testing.T) {
	t.Parallel()
	own := redistest.StartOwn(t)
	up := testutil.NewHeldUpstream(t, testutil.HeldOptions{})
	up.Open()
	oa := storeLossApp(t, up.URL, own.Addr, "2s")
	c := e2eClient(t)
	warmUp(t, c, oa.base)

	reload := func(d time.Duration) {
		t.Helper()
		next := cloneConfig(t, oa.liveConfig())
		next.Store.Redis.Timeout = d
		data, err := next.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		oa.applyConfig(data, nil)
		if got := oa.liveConfig().Store.Redis.Timeout; got != d {
			t.Fatalf("store.redis.timeout after the reload = %v; want %v", got, d)
		}
	}
	// unavailable stops Redis, sends one keyed write and returns how long
	// its 503 took; Redis runs again after it.
	unavailable := func(key string) time.Duration {
		t.Helper()
		own.Signal(syscall.SIGSTOP)
		start := time.Now()
		a := post(c, oa.base, key, `{}`)
		took := time.Since(start)
		own.Signal(syscall.SIGCONT)
		if a.err != nil || a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, `"idempotency_unavailable"`) {
			t.Fatalf("keyed write with Redis stopped = %v; want 503 idempotency_unavailable", a)
		}
		testutil.Eventually(t, 10*time.Second, "keyed writes to run again", func() bool {
			return post(c, oa.base, key+"-after", `{}`).status == http.StatusCreated
		})
		return took
	}

	ld := startLoad(6, 0, func(w, i int) (bool, string) {
		a := post(c, oa.base, fmt.Sprintf("load-%d-%d", w, i), `{"n":1}`)
		return a.err == nil && a.status == http.StatusCreated, a.String()
	})
	time.Sleep(200 * time.Millisecond)
	reload(150 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	reload(3 * time.Second)
	time.Sleep(200 * time.Millisecond)
	reload(150 * time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	ld.stop(t, "keyed writes across three reloads")

	// Lowered to 150ms from 2s: the 503 comes after about 150ms (a store
	// call, and the claim's release, each bounded by it).
	if took := unavailable("lowered"); took > time.Second {
		t.Errorf("with the timeout lowered to 150ms, the 503 took %v; want well under the 2s it started with", took)
	} else {
		t.Logf("timeout 150ms: 503 after %v", took.Round(time.Millisecond))
	}
	// Raised past the start's value: a stopped Redis is waited for that
	// long (the new bound, not the old one, not the client's first).
	reload(2500 * time.Millisecond)
	if took := unavailable("raised"); took < 2300*time.Millisecond {
		t.Errorf("with the timeout raised to 2.5s, the 503 took %v; want at least about 2.5s", took)
	} else {
		t.Logf("timeout 2.5s: 503 after %v", took.Round(time.Millisecond))
	}
}
