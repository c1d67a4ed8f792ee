package app

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/keystore/sealed"
)

// TestReloadEncryptionKeyEnv: idempotency.encryption_key_env reloads live
// (DESIGN.md, Config), under a load of keyed writes with none failing.
// Each change applies from the next write: a new key seals the answers
// stored after it, and the answers sealed before still replay (the process
// keeps the keys it sealed with); turned off, answers are stored as they
// come, and the sealed ones still replay; a variable that is not set, or is
// not a key, refuses the reload and the running key keeps sealing.
// Not parallel: it sets environment variables.
func TestReloadEncryptionKeyEnv(t *testing.T) {
	const a, b = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="
	t.Setenv("IDEMGATE_TEST_SEAL_A", a)
	t.Setenv("IDEMGATE_TEST_SEAL_B", b)
	t.Setenv("IDEMGATE_TEST_SEAL_BAD", "not-a-key")
	keyA, _ := sealed.ParseKey(a)
	keyB, _ := sealed.ParseKey(b)
	up := newCountingUpstream(t)
	oa := startOpsApp(t, fmt.Sprintf(`upstream: {url: "%s"}
edge_limit: {rate: 0}
idempotency: {require_identity: false, encryption_key_env: IDEMGATE_TEST_SEAL_A}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`, up.URL), "", nil)
	c := e2eClient(t)
	pay := func(key string) httpAnswer {
		return doHTTP(t, c, "POST", oa.base+"/pay", `{"n":1}`, "Idempotency-Key", key)
	}
	ld := startLoad(4, 0, func(w, i int) (bool, string) {
		r := pay(fmt.Sprintf("load-%d-%d", w, i))
		return r.status == 201, fmt.Sprint(r)
	})
	reload := func(env string) {
		t.Helper()
		next := cloneConfig(t, oa.liveConfig())
		next.Idempotency.EncryptionKeyEnv = env
		data, err := next.EffectiveYAML()
		if err != nil {
			t.Fatal(err)
		}
		oa.applyConfig(data, nil)
	}
	sealing := func() (byte, bool) { return oa.built.sealed.Sealing() }
	replays := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if r := pay(k); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry of %s: %v; want its replay", k, r)
			}
			if n := up.count("/pay", k); n != 1 {
				t.Errorf("%s ran %d times; want 1", k, n)
			}
		}
	}
	if r := pay("k-a"); r.status != 201 {
		t.Fatalf("first write: %v", r)
	}
	if id, ok := sealing(); !ok || id != keyA.ID() {
		t.Fatalf("sealing at start = %d, %v; want key A's id %d", id, ok, keyA.ID())
	}

	reload("IDEMGATE_TEST_SEAL_B")
	if id, ok := sealing(); !ok || id != keyB.ID() {
		t.Errorf("after the reload to B, sealing = %d, %v; want key B's id %d", id, ok, keyB.ID())
	}
	if r := pay("k-b"); r.status != 201 {
		t.Fatalf("write under B: %v", r)
	}
	replays("k-a", "k-b")

	for _, bad := range []string{"IDEMGATE_TEST_SEAL_UNSET", "IDEMGATE_TEST_SEAL_BAD"} {
		before := len(oa.logs.String())
		reload(bad)
		logs := oa.logs.String()[before:]
		if !strings.Contains(logs, "config reload refused") || !strings.Contains(logs, bad) {
			t.Errorf("reload to %s: the log does not say it was refused, naming the variable:\n%s", bad, logs)
		}
		if got := oa.liveConfig().Idempotency.EncryptionKeyEnv; got != "IDEMGATE_TEST_SEAL_B" {
			t.Errorf("after the refused reload to %s, encryption_key_env = %q; want the running IDEMGATE_TEST_SEAL_B", bad, got)
		}
		if id, ok := sealing(); !ok || id != keyB.ID() {
			t.Errorf("after the refused reload to %s, sealing = %d, %v; want key B's", bad, id, ok)
		}
	}

	before := len(oa.logs.String())
	reload("")
	if _, ok := sealing(); ok {
		t.Error("after the reload to none, the store still seals")
	}
	if logs := oa.logs.String()[before:]; !strings.Contains(logs, "idempotency.encryption_key_env changed") || !strings.Contains(logs, `"earlier_keys_kept":2`) {
		t.Errorf("the reload to none does not log the change with the two keys kept:\n%s", logs)
	}
	if r := pay("k-none"); r.status != 201 {
		t.Fatalf("write with sealing off: %v", r)
	}
	replays("k-a", "k-b", "k-none")

	reload("IDEMGATE_TEST_SEAL_A")
	if id, ok := sealing(); !ok || id != keyA.ID() {
		t.Errorf("after the reload back to A, sealing = %d, %v; want key A's", id, ok)
	}
	// k-none was stored unsealed: with sealing on again it fails closed
	// (an unsealed answer is not trusted while a key seals), as after a
	// restart with a key; the sealed ones still open.
	replays("k-a", "k-b")
	if r := pay("k-none"); r.status != 503 {
		t.Errorf("retry of the answer stored unsealed, sealing on again: %v; want 503 (not opened, not run again)", r)
	}
	ld.stop(t, "keyed writes across the reloads")
}
