package app

import (
	"fmt"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// TestReloadEncryptionKeyEnv: idempotency.encryption_key_env needs a
// restart (the environment is read at start). A reload that changes it is
// applied but for that key, which keeps its running value: the running
// key still seals and opens (a write stored before the reload replays
// after it), the change is logged as needing a restart, and the log says
// what the restart would meet: a variable that is not set (or not a key)
// would stop it, another key would leave earlier answers unopenable.
// Not parallel: it sets environment variables.
func TestReloadEncryptionKeyEnv(t *testing.T) {
	t.Setenv("IDEMGATE_TEST_SEAL_A", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=")
	t.Setenv("IDEMGATE_TEST_SEAL_B", "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA=")
	t.Setenv("IDEMGATE_TEST_SEAL_BAD", "not-a-key")
	up := newCountingUpstream(t)
	oa := startOpsApp(t, fmt.Sprintf(`upstream: {url: "%s"}
edge_limit: {rate: 0}
idempotency: {require_identity: false, encryption_key_env: IDEMGATE_TEST_SEAL_A}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`, up.URL), "", nil)
	c := e2eClient(t)
	pay := func() httpAnswer { return doHTTP(t, c, "POST", oa.base+"/pay", `{"n":1}`, "Idempotency-Key", "k1") }
	if a := pay(); a.status != 201 {
		t.Fatalf("first write: %v", a)
	}
	for _, tc := range []struct {
		env  string
		want string // in the log line about the restart
	}{
		{"IDEMGATE_TEST_SEAL_B", "answers sealed with the running key cannot be opened"},
		{"IDEMGATE_TEST_SEAL_UNSET", "a restart with this file would fail"},
		{"IDEMGATE_TEST_SEAL_BAD", "a restart with this file would fail"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			before := len(oa.logs.String())
			next := cloneConfig(t, oa.liveConfig())
			next.Idempotency.EncryptionKeyEnv = tc.env
			next.Idempotency.MaxWaiters = 7 // a live key in the same file
			data, err := next.EffectiveYAML()
			if err != nil {
				t.Fatal(err)
			}
			oa.applyConfig(data, nil)
			logs := oa.logs.String()[before:]
			for _, want := range []string{`"keys":["idempotency.encryption_key_env"]`, "need a restart", tc.want} {
				if !strings.Contains(logs, want) {
					t.Errorf("the reload's log does not say %q:\n%s", want, logs)
				}
			}
			live := oa.liveConfig()
			if live.Idempotency.EncryptionKeyEnv != "IDEMGATE_TEST_SEAL_A" || live.Idempotency.MaxWaiters != 7 {
				t.Errorf("running encryption_key_env %q, max_waiters %d; want the start's variable and the file's 7",
					live.Idempotency.EncryptionKeyEnv, live.Idempotency.MaxWaiters)
			}
			if a := pay(); a.status != 201 || a.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("retry after the reload: %v; want the replay, opened with the running key", a)
			}
			if n := up.count("/pay", "k1"); n != 1 {
				t.Errorf("the write ran %d times; want 1", n)
			}
		})
	}
	if !config.RestartOnly("idempotency.encryption_key_env") {
		t.Error("idempotency.encryption_key_env reloads; this test expects a restart")
	}
}
