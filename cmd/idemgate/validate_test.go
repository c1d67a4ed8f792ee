package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateOutput runs validate as a user would: every problem of the
// file in one run, environment warnings first, and a missing file as one
// line. It sets environment variables, so it is not parallel.
func TestValidateOutput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Only the variables below: the ones make test sets are known, but a
	// developer's shell may hold others.
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "IDEMGATE_") {
			t.Setenv(name, "") // restored when the test ends
			os.Unsetenv(name)
		}
	}
	t.Setenv("IDEMGATE_UPSTREM_URL", "http://127.0.0.1:1")
	t.Setenv("IDEMGATE_PORT", "tcp://10.0.0.1:8080") // a Kubernetes service link
	t.Setenv("IDEMGATE_SEAL", "a2V5")                // named by encryption_key_env
	const warning = "warning: IDEMGATE_UPSTREM_URL: no config key or setting reads this variable; it is ignored; did you mean IDEMGATE_UPSTREAM_URL?\n"
	tests := []struct {
		name, file, body string
		err, stderr      string // stderr exactly
	}{
		{"valid", "good.yaml", "upstream: {url: http://127.0.0.1:3000}\nidempotency: {encryption_key_env: IDEMGATE_SEAL}\n",
			"", warning},
		{"valid but risky", "risky.yaml", "upstream: {url: http://127.0.0.1:3000}\nstore: {backend: redis}\nidempotency: {lease: 2s, encryption_key_env: IDEMGATE_SEAL}\n",
			"", warning + "warning: idempotency.lease: 2s is shorter than 6 × store.redis.timeout (500ms, the default) = 3s: a renewal starts lease/3 after the last one, and one that waits for a connection, dials, writes and reads, each up to the timeout, lands after the lease ended if Redis is that slow; a retry could then take over a request that still runs\n"},
		{"limit by a header any client sets", "byheader.yaml", "upstream: {url: http://127.0.0.1:3000}\nidempotency: {encryption_key_env: IDEMGATE_SEAL}\nroutes:\n  - {name: search, method: GET, path: /search, rate_limit: {requests: 10, per: 1s, by: \"header:X-Api-Key\"}}\n",
			"", warning + "warning: routes[0].rate_limit.by: \"header:X-Api-Key\" counts per value of a header any client can set, so a client that sends a new value each time is never limited; client_ip.trusted_proxies is empty, so no proxy in front sets it. Use by: identity with idempotency.identity.jwt (verified claims), or list the proxy that overwrites X-Api-Key in client_ip.trusted_proxies\n"},
		{"missing file", "", "", "nope.yaml: no such file or directory", ""},
		{"syntax", "syntax.yaml", "upstream:\n  url: http://x\nroutes:\n  - name: a\n    method: POST\n   path: /a\n",
			"syntax.yaml: invalid config (1 problem)",
			// After a syntax error nothing is decoded: the variable that
			// encryption_key_env names is not known.
			"warning: IDEMGATE_SEAL: no config key or setting reads this variable; it is ignored\n" + warning +
				`line 6: did not find expected '-' indicator (check the indentation: a list item's keys line up under its first key): "   path: /a"` + "\n"},
		{"four semantic errors and a typo", "many.yaml", `
upstream: {url: "127.0.0.1:3000"}
idempotency: {retension: 48h, lease: 2h, encryption_key_env: IDEMGATE_SEAL}
routes:
  - {name: pay, method: GET, path: /pay, idempotent: true, timeout: 3h}
`, "many.yaml: invalid config (5 problems)", warning + `idempotency.retension: unknown key; did you mean retention?
upstream.url: "127.0.0.1:3000": want an absolute http or https URL
idempotency.max_lease: 1h (the default) is less than idempotency.lease (2h): renewals stop at max_lease
routes[0].idempotent: is true on GET, a safe method; only writes are idempotent routes
routes[0].timeout: 3h exceeds idempotency.max_lease (1h, the default): the claim stops being renewed while the write still runs, and a retry could take the key over and run the write twice; lower the timeout or raise max_lease
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "nope.yaml")
			if tt.file != "" {
				path = write(tt.file, tt.body)
			}
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"validate", "--config", path}, &out, &errOut)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("validate = %v; want nil", err)
			case tt.err != "" && (err == nil || err.Error() != filepath.Join(dir, tt.err)):
				t.Errorf("validate = %v; want %q", err, filepath.Join(dir, tt.err))
			}
			if got := errOut.String(); got != tt.stderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", got, tt.stderr)
			}
			if tt.err == "" && !strings.Contains(out.String(), "valid") {
				t.Errorf("stdout %q; want the summary", out.String())
			}
		})
	}
}

// TestValidateDiff: validate --diff OLD NEW prints what a reload does
// (config.Compare, the reload's own rule) and fails when a reload would
// refuse NEW or either file is invalid.
func TestValidateDiff(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, idem, route string) string {
		p := filepath.Join(dir, name)
		if !strings.Contains(idem, "max_lease") {
			idem = ", max_lease: 5m" + idem
		}
		backend := "redis"
		if strings.Contains(route, "ns") {
			backend = "local" // a limit in nanoseconds, which Redis cannot count
		}
		body := `upstream: {url: "http://127.0.0.1:3000", timeout: 1m}
limiter: {backend: ` + backend + `}
idempotency: {require_identity: false, late_answer_wait: 0s` + idem + `}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true` + route + `}
`
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := write("old.yaml", "", "")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("upstream: {url: nope}\n"), 0o600)
	for _, tc := range []struct {
		name, new       string
		stdout, err     string // stdout exactly, after the first line; err "" for none
		stderrHas       string
		firstLineSuffix string
	}{
		{name: "no change", new: old, firstLineSuffix: ": no change"},
		// encryption_key_env reloads too; the restart line is the
		// refused case's.
		{name: "live keys, an effect", new: write("b.yaml", ", drop_headers: [Set-Cookie], encryption_key_env: IDEMGATE_KEY", ", fingerprint_ignore: [/meta]"),
			stdout: "applied on reload: idempotency.drop_headers, idempotency.encryption_key_env, routes\n" +
				"warning: route pay: fingerprint_ignore can change its requests' fingerprints: a retry of a write made before, with the same key, may get 409 idempotency_key_reused\n"},
		{name: "refused", new: write("c.yaml", "", ", rate_limit: {requests: 1, per: 1500ns}"),
			stdout: "applied on reload: routes\nneed a restart: limiter.backend\n",
			err:    "c.yaml: a reload would refuse it: valid on its own, but not with the running values of limiter.backend; restart to apply it", stderrHas: "routes[0].rate_limit.per"},
		{name: "invalid", new: bad, err: "bad.yaml: invalid config", stderrHas: "upstream.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := run(context.Background(), []string{"validate", "--diff", old, tc.new}, &out, &errOut)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("validate --diff = %v; want nil", err)
			case tc.err != "" && (err == nil || err.Error() != filepath.Join(dir, tc.err)):
				t.Errorf("validate --diff = %v; want %q", err, filepath.Join(dir, tc.err))
			}
			if !strings.Contains(errOut.String(), tc.stderrHas) {
				t.Errorf("stderr %q; want %q in it", errOut.String(), tc.stderrHas)
			}
			if tc.name == "invalid" {
				return
			}
			first, rest, _ := strings.Cut(out.String(), "\n")
			if want := old + " -> " + tc.new; !strings.HasPrefix(first, want) || !strings.HasSuffix(first, tc.firstLineSuffix) {
				t.Errorf("first line %q; want %q%s", first, want, tc.firstLineSuffix)
			}
			if rest != tc.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", rest, tc.stdout)
			}
		})
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--diff", old}, &out, &errOut); err == nil {
		t.Errorf("validate --diff with one file = nil; want a usage error")
	}
}
