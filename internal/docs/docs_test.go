package docs

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
)

// root is the repository's root, two directories up from this package.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}()

// markdownFiles are the documents the tests read, relative to root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range more {
		rel, _ := filepath.Rel(root, f)
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 5 {
		t.Fatalf("found %v; want README.md and docs/{config,codes,guarantees,operations}.md", files)
	}
	return files
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// stampRE is the comment `make docs` puts into each SVG it renders.
var stampRE = regexp.MustCompile(`<!-- rendered by make docs from ([^ ]+\.dot) sha256:([0-9a-f]{64}) -->`)

// TestPicturesUpToDate: each docs/NAME.dot has a docs/NAME.svg rendered from
// exactly its current text, and each rendered SVG still has its source.
func TestPicturesUpToDate(t *testing.T) {
	t.Parallel()
	dots, err := filepath.Glob(filepath.Join(root, "docs", "*.dot"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dots) < 2 {
		t.Fatalf("found %d .dot sources in docs/; want the deployment and the lease timeline", len(dots))
	}
	for _, dot := range dots {
		src, err := os.ReadFile(dot)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(src)
		svgPath := strings.TrimSuffix(dot, ".dot") + ".svg"
		svg, err := os.ReadFile(svgPath)
		if err != nil {
			t.Errorf("%s has no rendering: run make docs (%v)", filepath.Base(dot), err)
			continue
		}
		m := stampRE.FindSubmatch(svg)
		switch {
		case m == nil:
			t.Errorf("%s has no make docs stamp: run make docs", filepath.Base(svgPath))
		case string(m[1]) != filepath.Base(dot):
			t.Errorf("%s was rendered from %s; want %s", filepath.Base(svgPath), m[1], filepath.Base(dot))
		case string(m[2]) != hex.EncodeToString(sum[:]):
			t.Errorf("%s is out of date with %s: run make docs", filepath.Base(svgPath), filepath.Base(dot))
		}
		if !bytes.Contains(svg, []byte("<svg")) {
			t.Errorf("%s is not an SVG", filepath.Base(svgPath))
		}
	}
	svgs, _ := filepath.Glob(filepath.Join(root, "docs", "*.svg"))
	for _, svg := range svgs {
		b, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		if m := stampRE.FindSubmatch(b); m != nil {
			if _, err := os.Stat(filepath.Join(root, "docs", string(m[1]))); err != nil {
				t.Errorf("%s was rendered from %s, which is gone", filepath.Base(svg), m[1])
			}
		}
	}
}

// TestStampDetectsChange: the stamp check fails when the source changes
// after rendering (the check above is not vacuous).
func TestStampDetectsChange(t *testing.T) {
	src := []byte("digraph a { x -> y }\n")
	sum := sha256.Sum256(src)
	svg := fmt.Sprintf("<?xml?>\n<!-- rendered by make docs from a.dot sha256:%x -->\n<svg/>", sum)
	m := stampRE.FindStringSubmatch(svg)
	if m == nil || m[2] != hex.EncodeToString(sum[:]) {
		t.Fatalf("stamp %q not found in %q", sum, svg)
	}
	changed := sha256.Sum256(append(src, ' '))
	if m[2] == hex.EncodeToString(changed[:]) {
		t.Fatal("a changed source has the same stamp")
	}
}

// block is one runnable command block.
type block struct {
	file string
	line int    // of the opening fence
	kind string // "" or "demo"
	cmds []command
}

// command is one line of a block with the output lines shown after it.
type command struct {
	text string
	want []string
}

var markerRE = regexp.MustCompile(`^<!-- runnable(?:: (\w+))? -->$`)

// runnableBlocks extracts the marked blocks of text.
func runnableBlocks(t *testing.T, file, text string) []block {
	t.Helper()
	lines := strings.Split(text, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		m := markerRE.FindStringSubmatch(strings.TrimSpace(lines[i]))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Errorf("%s:%d: a runnable marker not followed by a fenced block", file, i+1)
			continue
		}
		b := block{file: file, line: i + 2, kind: m[1]}
		if b.kind != "" && b.kind != "demo" && b.kind != "serve" {
			t.Errorf("%s:%d: unknown runnable kind %q", file, i+1, b.kind)
		}
		for i += 2; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			l := strings.TrimSpace(lines[i])
			switch {
			case l == "":
			case strings.HasPrefix(l, "#>"):
				if len(b.cmds) == 0 {
					t.Errorf("%s:%d: output before any command", file, i+1)
					continue
				}
				c := &b.cmds[len(b.cmds)-1]
				c.want = append(c.want, strings.TrimSpace(strings.TrimPrefix(l, "#>")))
			case strings.HasPrefix(l, "#"):
			default:
				b.cmds = append(b.cmds, command{text: l})
			}
		}
		out = append(out, b)
	}
	return out
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binary is IDEMGATE_BIN, or idemgate built once for this test run.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("IDEMGATE_BIN"); p != "" {
			binPath, binErr = filepath.Abs(p)
			return
		}
		dir, err := os.MkdirTemp("", "idemgate-docs-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "idemgate")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/idemgate")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// TestRunnableBlocks runs every marked block of README.md and docs/*.md.
func TestRunnableBlocks(t *testing.T) {
	var blocks []block
	for _, f := range markdownFiles(t) {
		blocks = append(blocks, runnableBlocks(t, f, read(t, f))...)
	}
	all := ""
	for _, b := range blocks {
		for _, c := range b.cmds {
			all += b.kind + ": " + c.text + "\n"
		}
	}
	// What the README promises a new user must stay runnable.
	for _, want := range []string{"demo: curl ", "idemgate validate --config examples/", "idemgate routes import ",
		"serve: bin/idemgate --config examples/first-api.yaml", "serve: curl "} {
		if !strings.Contains(all, want) {
			t.Errorf("no runnable block runs %q", want)
		}
	}
	bin := binary(t)
	for _, b := range blocks {
		t.Run(fmt.Sprintf("%s:%d", b.file, b.line), func(t *testing.T) {
			if len(b.cmds) == 0 {
				t.Fatal("an empty runnable block")
			}
			replace := map[string]string{}
			var up *countingUpstream
			switch b.kind {
			case "demo":
				replace["http://127.0.0.1:8080"] = startDemo(t, bin, b)
			case "serve":
				var addr string
				addr, up = startServe(t, bin, b)
				replace["127.0.0.1:8080"] = addr
			}
			for _, c := range b.cmds {
				if b.kind == "serve" && serveRE.MatchString(c.text) {
					continue // started above
				}
				runCommand(t, bin, c, replace)
			}
			if up != nil {
				up.check(t)
			}
		})
	}
}

// serveRE matches the line of a "serve" block that starts idemgate.
var serveRE = regexp.MustCompile(`^bin/idemgate --config (\S+)(\s|$)`)

// countingUpstream is a loopback API standing for the reader's: each
// write answers 201 with a new order, and it counts the writes by
// Idempotency-Key.
type countingUpstream struct {
	mu    sync.Mutex
	byKey map[string]int // protected by mu
	n     int            // protected by mu
}

func (u *countingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.n++
	n := u.n
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		u.byKey[k]++
	}
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if r.Method == http.MethodGet {
		fmt.Fprintf(w, "{\"writes\":%d}\n", n)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "{\"id\":\"order_%d\"}\n", n)
}

// check fails t when the upstream ran a keyed write twice, or none.
func (u *countingUpstream) check(t *testing.T) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.byKey) == 0 {
		t.Error("no keyed write reached the upstream")
	}
	for k, n := range u.byKey {
		if n != 1 {
			t.Errorf("the upstream ran the write with Idempotency-Key %q %d times; want once", k, n)
		}
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServe starts a counting loopback upstream and, in front of it, the
// `bin/idemgate --config FILE` of b with the file as it is, but for
// upstream.url, listen and admin_listen, set through the environment
// (IDEMGATE_UPSTREAM_URL, ...) to the upstream's and to free ports. It
// returns idemgate's address once /readyz answers 200. Both stop when the
// test ends.
func startServe(t *testing.T, bin string, b block) (string, *countingUpstream) {
	t.Helper()
	var file string
	for _, c := range b.cmds {
		if m := serveRE.FindStringSubmatch(c.text); m != nil {
			file = m[1]
		}
	}
	if file == "" {
		t.Fatalf("%s:%d: a serve block without a `bin/idemgate --config FILE` line", b.file, b.line)
	}
	up := &countingUpstream{byKey: map[string]int{}}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)

	addr, admin := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", file, "--log-flush", "0")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "IDEMGATE_UPSTREAM_URL="+upSrv.URL, "IDEMGATE_LISTEN="+addr, "IDEMGATE_ADMIN_LISTEN="+admin)
	var logs testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })

	client := &http.Client{Timeout: time.Second}
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if res, err := client.Get("http://" + admin + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return addr, up
			}
		}
		select {
		case <-exited:
			t.Fatalf("idemgate --config %s exited before it was ready:\n%s", file, logs.String())
		case <-deadline:
			t.Fatalf("idemgate --config %s was not ready within 20s:\n%s", file, logs.String())
		case <-tick.C:
		}
	}
}

// startDemo starts `idemgate demo` on free ports, checks that b's curl lines
// are the ones it prints, and returns its proxy's URL. The demo stops when
// the test ends.
func startDemo(t *testing.T, bin string, b block) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0")
	cmd.Dir = root
	cmd.Stderr = io.Discard
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })

	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var proxy string
	var printed []string
	timeout := time.After(20 * time.Second)
read:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the demo stopped before printing its commands")
			}
			l = strings.TrimSpace(l)
			if rest, ok := strings.CutPrefix(l, "proxy "); ok {
				proxy = strings.Fields(rest)[0]
			}
			if strings.HasPrefix(l, "curl ") {
				printed = append(printed, l)
			}
			if strings.HasPrefix(l, "Ctrl-C") {
				break read
			}
		case <-timeout:
			t.Fatal("the demo did not start within 20s")
		}
	}
	go func() {
		for range lines {
		}
	}()
	if proxy == "" {
		t.Fatal("the demo printed no proxy address")
	}
	var shown []string
	for _, c := range b.cmds {
		if strings.HasPrefix(c.text, "curl ") {
			shown = append(shown, strings.ReplaceAll(c.text, "http://127.0.0.1:8080", proxy))
		}
	}
	if strings.Join(shown, "\n") != strings.Join(printed, "\n") {
		t.Errorf("%s:%d shows other curl lines than `idemgate demo` prints:\nshown:\n%s\nprinted:\n%s",
			b.file, b.line, strings.Join(shown, "\n"), strings.Join(printed, "\n"))
	}
	return proxy
}

// runCommand runs one command line with bash from the repository's root,
// `bin/idemgate` being bin, and checks its output shows c.want.
func runCommand(t *testing.T, bin string, c command, replace map[string]string) {
	t.Helper()
	line := c.text
	if strings.HasPrefix(line, "go build ") && strings.Contains(line, "./cmd/idemgate") {
		return // the binary under test stands for it
	}
	for from, to := range replace {
		line = strings.ReplaceAll(line, from, to)
	}
	var out []byte
	if strings.HasPrefix(line, "curl ") {
		if _, err := exec.LookPath("curl"); err != nil {
			out = goCurl(t, line)
		} else {
			out = runShell(t, line, bin)
		}
	} else {
		out = runShell(t, line, bin)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		got[strings.TrimSpace(l)] = true
	}
	for _, w := range c.want {
		if !got[w] {
			t.Errorf("%s\nshows %q, which its output lacks:\n%s", c.text, w, out)
		}
	}
}

// runShell runs line with bash, bounded in time, with bin/idemgate resolved
// to bin through a PATH-free substitution.
func runShell(t *testing.T, line, bin string) []byte {
	t.Helper()
	line = regexp.MustCompile(`(^|[\s;|&(])bin/idemgate\b`).ReplaceAllString(line, "${1}"+bin)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -o pipefail; "+line)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s: %v\n%s%s", line, err, out, stderr)
	}
	return out
}

// goCurl does what the curl lines of the README do (-s, -i, -X, -H, -d and
// a URL) where curl is not installed, writing what `curl -si` writes.
func goCurl(t *testing.T, line string) []byte {
	t.Helper()
	var args []string
	for _, m := range regexp.MustCompile(`'[^']*'|\S+`).FindAllString(line, -1) {
		args = append(args, strings.Trim(m, "'"))
	}
	method, url, body, include := "GET", "", "", false
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
			if method == "GET" {
				method = "POST"
			}
		case "-s":
		case "-i", "-si":
			include = true
		default:
			url = args[i]
		}
	}
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	if body != "" && hdr.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	client := &http.Client{Timeout: 30 * time.Second}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	if include {
		fmt.Fprintf(&b, "HTTP/1.1 %s\n", res.Status)
		res.Header.Write(&b)
		b.WriteString("\n")
	}
	io.Copy(&b, res.Body)
	return b.Bytes()
}

// TestGoCurl: the stand-in for curl sends what the line says and writes
// what `curl -si` would.
func TestGoCurl(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Method+" "+r.Header.Get("Idempotency-Key")+" "+r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	}))
	defer srv.Close()
	out := string(goCurl(t, `curl -si -X PUT `+srv.URL+`/x -H 'Idempotency-Key: k 1' -H 'Content-Type: application/json' -d '{"a": 1}'`))
	for _, want := range []string{"HTTP/1.1 201 Created\n", "X-Seen: PUT k 1 application/json\r\n", "\n{\"a\": 1}"} {
		if !strings.Contains(out, want) {
			t.Errorf("goCurl wrote %q; want it to contain %q", out, want)
		}
	}
	if out := string(goCurl(t, `curl -s `+srv.URL+`/y`)); out != "" {
		t.Errorf("curl -s of an empty GET wrote %q; want the body only", out)
	}
}

var fileMarkerRE = regexp.MustCompile(`^<!-- file: (\S+) -->$`)

// TestFileBlocks: a block marked "<!-- file: PATH -->" shows PATH exactly,
// so that a file the tests check (a chart scenario, say) and the text a
// reader copies are one.
func TestFileBlocks(t *testing.T) {
	t.Parallel()
	n := 0
	for _, f := range markdownFiles(t) {
		lines := strings.Split(read(t, f), "\n")
		for i, l := range lines {
			m := fileMarkerRE.FindStringSubmatch(strings.TrimSpace(l))
			if m == nil {
				continue
			}
			n++
			if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
				t.Errorf("%s:%d: a file marker not followed by a fenced block", f, i+1)
				continue
			}
			var shown strings.Builder
			for j := i + 2; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				shown.WriteString(lines[j] + "\n")
			}
			if want := read(t, m[1]); shown.String() != want {
				t.Errorf("%s:%d shows other text than %s:\nshown:\n%s\nfile:\n%s", f, i+2, m[1], shown.String(), want)
			}
		}
	}
	if n == 0 {
		t.Error("no block is marked as a file's text (README's Helm values should be)")
	}
}

// TestCodesDocumented: every code the proxy answers with (newProblem in
// proxy/) is a row of docs/codes.md's table with its status, and every
// outcome it records (the Outcome constants) is named there.
func TestCodesDocumented(t *testing.T) {
	t.Parallel()
	codes := read(t, "docs/codes.md")
	files, err := filepath.Glob(filepath.Join(root, "proxy", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	problemRE := regexp.MustCompile(`newProblem\((\d{3}), "([a-z_]+)"`)
	outcomeRE := regexp.MustCompile(`(?m)^\s*Outcome\w+\s*=\s*"([a-z_]+)"`)
	nCodes, nOutcomes := 0, 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range problemRE.FindAllStringSubmatch(string(b), -1) {
			nCodes++
			if !regexp.MustCompile("(?m)^\\| `" + m[2] + "` \\| " + m[1]).MatchString(codes) {
				t.Errorf("docs/codes.md has no row | `%s` | %s |", m[2], m[1])
			}
		}
		for _, m := range outcomeRE.FindAllStringSubmatch(string(b), -1) {
			nOutcomes++
			if !strings.Contains(codes, "`"+m[1]+"`") {
				t.Errorf("docs/codes.md does not name the outcome %s", m[1])
			}
		}
	}
	if nCodes < 15 || nOutcomes < 15 {
		t.Fatalf("found %d codes and %d outcomes in proxy/; the patterns no longer match", nCodes, nOutcomes)
	}
}
