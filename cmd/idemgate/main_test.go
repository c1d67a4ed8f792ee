package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
)

type syncBuffer = testutil.SyncBuffer

func TestVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "idemgate ") {
		t.Errorf("version printed %q", out.String())
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `
upstream: {url: "http://127.0.0.1:3000"}
routes:
  - {name: create_cart, method: POST, path: /ucp/v1/carts, idempotent: true, rate_limit: {requests: 600, per: 60s}}
  - {name: get_cart, method: GET, path: "/ucp/v1/carts/{id}"}
`)
	bad := write("bad.yaml", `
upstream: {url: ""}
idempotency: {reuse_status: 418, lease: 5}
routes:
  - {name: a, method: GET, path: /x, idempotent: true}
  - {name: a, method: POST, path: "/y/{id}", session: cart}
`)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--config", good}, &out, &errOut); err != nil {
		t.Fatalf("validate good = %v\n%s", err, errOut.String())
	}
	// good.yaml leaves the identity to the default: validate says what
	// that means.
	for _, want := range []string{"valid", "create_cart", "POST", "/ucp/v1/carts", "idempotent", "rate_limit=600/1m0s", "get_cart",
		"identity: the exact values of header(s) Authorization (the default", "require_identity: true"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out.String())
		}
	}
	// A chosen identity needs no explanation.
	chosen := write("chosen.yaml", `
upstream: {url: "http://127.0.0.1:3000"}
idempotency: {identity: {cookies: [sid]}}
routes:
  - {name: create_cart, method: POST, path: /ucp/v1/carts, idempotent: true, rate_limit: {requests: 9, per: 1s, by: "header:X-Api-Key"}}
`)
	out.Reset()
	if err := run(context.Background(), []string{"validate", "--config", chosen}, &out, &errOut); err != nil {
		t.Fatalf("validate chosen = %v\n%s", err, errOut.String())
	}
	if strings.Contains(out.String(), "identity:") || !strings.Contains(out.String(), "by=header:X-Api-Key") {
		t.Errorf("validate chosen printed:\n%s\nwant no identity explanation and the limit's by", out.String())
	}
	out.Reset()
	errOut.Reset()
	if err := run(context.Background(), []string{"validate", "--config", bad}, &out, &errOut); err == nil {
		t.Fatalf("validate bad = nil; want an error")
	}
	// lease: 5 fails at decoding (a duration without unit); fix that and the
	// rest are reported together, one line each, naming the key.
	for _, want := range []string{"idempotency.lease"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("validate errors lack %q:\n%s", want, errOut.String())
		}
	}
	bad2 := write("bad2.yaml", `
upstream: {url: ""}
idempotency: {reuse_status: 418}
routes:
  - {name: a, method: GET, path: /x, idempotent: true}
  - {name: a, method: POST, path: "/y/{id}", session: cart}
`)
	errOut.Reset()
	if err := run(context.Background(), []string{"validate", "--config", bad2}, &out, &errOut); err == nil {
		t.Fatalf("validate bad2 = nil; want an error")
	}
	for _, want := range []string{"upstream.url", "idempotency.reuse_status", "routes[0].idempotent", "routes[1].name", "routes[1].session"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("validate errors lack %q:\n%s", want, errOut.String())
		}
	}
}

// curlLine runs one of the demo's curl lines with net/http and returns the
// status, the headers and the body.
func curlLine(t *testing.T, line string) (int, http.Header, []byte) {
	t.Helper()
	args := shellSplit(line)
	method, url, body := "GET", "", ""
	hdr := http.Header{}
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "-X":
			i++
			method = args[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			hdr.Add(k, strings.TrimSpace(v))
		case "-d":
			i++
			body = args[i]
		case "-s", "-si", "-i":
		default:
			url = args[i]
		}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

func shellSplit(s string) []string {
	var out []string
	re := regexp.MustCompile(`'[^']*'|\S+`)
	for _, m := range re.FindAllString(s, -1) {
		out = append(out, strings.Trim(m, "'"))
	}
	return out
}

func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("demo did not start:\n%s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var lines []string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "curl ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 8 {
		t.Fatalf("demo printed %d curl lines; want 8:\n%s", len(lines), stdout.String())
	}
	type want struct {
		status   int
		replayed bool
		code     string
	}
	wants := []want{{201, false, ""}, {201, true, ""}, {409, false, "idempotency_key_reused"}, {400, false, "idempotency_identity_missing"},
		{201, false, ""}, {201, false, ""}, {201, true, ""}, {200, false, ""}}
	var bodies [][]byte
	for i, l := range lines {
		status, hdr, body := curlLine(t, l)
		bodies = append(bodies, body)
		w := wants[i]
		if status != w.status || (hdr.Get("Idempotent-Replayed") == "true") != w.replayed || (w.code != "" && !strings.Contains(string(body), w.code)) {
			t.Errorf("line %d %q = %d replayed=%q %s; want %+v", i+1, l, status, hdr.Get("Idempotent-Replayed"), body, w)
		}
	}
	if !bytes.Equal(bodies[0], bodies[1]) || !bytes.Equal(bodies[5], bodies[6]) {
		t.Errorf("replays differ from the first answers")
	}
	var stats struct {
		Executions int `json:"executions"`
		Orders     int `json:"orders"`
	}
	if err := json.Unmarshal(bodies[7], &stats); err != nil || stats.Executions != 3 || stats.Orders != 1 {
		t.Errorf("upstream stats = %s (%v); want 3 executions, 1 order", bodies[7], err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("demo returned %v", err)
	}
	if strings.Contains(stderr.String(), "demo-1") || strings.Contains(stderr.String(), "pay-1") || strings.Contains(stderr.String(), "demo-client") {
		t.Errorf("a key reached the log")
	}
	// The demo does not warn about its own configuration (issue 21: its
	// first curl used to log the trusted_proxies warning).
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(l, `"level":"WARN"`) || strings.Contains(l, `"level":"ERROR"`) {
			t.Errorf("the demo logged %s", l)
		}
	}
}

// TestSubcommandHelp: every subcommand's -h and --help print its usage to
// stdout and succeed (flag.ErrHelp is no error); a mistake prints to stderr
// and fails.
func TestSubcommandHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"-h"}, "idemgate --config FILE"},
		{[]string{"--help"}, "idemgate --config FILE"},
		{[]string{"help"}, "idemgate --config FILE"},
		{[]string{"--config", "idemgate.yaml", "-h"}, "usage: idemgate --config FILE"},
		{[]string{"--config", "idemgate.yaml", "--help"}, "-log-level"},
		{[]string{"demo", "-h"}, "usage: idemgate demo"},
		{[]string{"demo", "--help"}, "-admin-listen"},
		{[]string{"validate", "-h"}, "idemgate validate --config FILE"},
		{[]string{"validate", "--help"}, "-against"},
		{[]string{"healthcheck", "-h"}, "usage: idemgate healthcheck"},
		{[]string{"healthcheck", "--help"}, "-timeout"},
		{[]string{"config", "-h"}, "usage: idemgate config"},
		{[]string{"config", "--help"}, "usage: idemgate config"},
		{[]string{"routes", "-h"}, "usage: idemgate routes import SPEC"},
		{[]string{"routes", "import", "-h"}, "usage: idemgate routes import SPEC"},
		{[]string{"routes", "import", "--help"}, "-base-path"},
		{[]string{"version", "-h"}, "usage: idemgate version"},
		{[]string{"version", "--help"}, "usage: idemgate version"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			if err := run(context.Background(), tt.args, &out, &errOut); err != nil {
				t.Fatalf("run = %v; want success\nstderr: %s", err, errOut.String())
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("stdout %q; want it to contain %q", out.String(), tt.want)
			}
			if errOut.Len() > 0 {
				t.Errorf("stderr %q; want nothing", errOut.String())
			}
		})
	}
	for _, args := range [][]string{
		{"demo", "--bogus"}, {"validate", "--bogus"}, {"healthcheck", "--bogus"}, {"config", "--bogus"},
		{"routes", "import", "--bogus"}, {"--config", "x.yaml", "--bogus"}, {"version", "extra"}, {"routes"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			if err := run(context.Background(), args, &out, &errOut); err == nil {
				t.Fatal("run succeeded; want a usage error")
			}
			if out.Len() > 0 || errOut.Len() == 0 {
				t.Errorf("stdout %q, stderr %q; want the problem on stderr only", out.String(), errOut.String())
			}
		})
	}
}

// TestServeInvalidConfig: a server that cannot start for its config says
// why in JSON log lines, one per problem with its key, after the
// IDEMGATE_* variables nothing reads (with the nearest name), and main
// prints nothing more.
func TestServeInvalidConfig(t *testing.T) {
	t.Setenv("IDEMGATE_UPSTREM_URL", "http://127.0.0.1:3000")
	p := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(p, []byte("ADMIN_LISTEN: \":9091\"\nidempotency: {replay_header: 5}\nroutes:\n  - {name: a, method: POTS, path: /a, idempotent: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"--config", p, "--log-flush", "0"}, &out, &errOut)
	if !errors.Is(err, errReported) {
		t.Fatalf("run = %v; want errReported", err)
	}
	type line struct{ Msg, Level, Key, Problem, Name, File string }
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		var ln line
		if err := json.Unmarshal([]byte(l), &ln); err != nil {
			t.Fatalf("stderr line %q is not JSON: %v\n%s", l, err, errOut.String())
		}
		lines = append(lines, ln)
	}
	problems := map[string]string{}
	envWarned := false
	for _, l := range lines {
		switch l.Msg {
		case "invalid config":
			if l.Level != "ERROR" || l.File != p {
				t.Errorf("problem line %+v; want level ERROR and file %s", l, p)
			}
			problems[l.Key] = l.Problem
		case "unknown environment variable":
			envWarned = l.Name == "IDEMGATE_UPSTREM_URL" && strings.Contains(l.Problem, "did you mean IDEMGATE_UPSTREAM_URL?")
		}
	}
	want := map[string]string{
		"ADMIN_LISTEN":              "unknown key; keys are case-sensitive: did you mean admin_listen?",
		"idempotency.replay_header": `5 is not a string (quote it: "5")`,
		"routes[0].method":          `"POTS" is not a registered HTTP method`,
		"upstream.url":              "is required",
	}
	for k, w := range want {
		if !strings.HasPrefix(problems[k], w) {
			t.Errorf("problem of %s = %q; want %q", k, problems[k], w)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("problems %v; want %d", problems, len(want))
	}
	if !envWarned {
		t.Errorf("no warning for IDEMGATE_UPSTREM_URL with the nearest name:\n%s", errOut.String())
	}
}
