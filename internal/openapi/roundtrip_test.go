package openapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/internal/testutil"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// idemgateBinary builds cmd/idemgate once per test process: the round trip
// runs the real command, config loading and wiring included, as an
// operator would after `routes import`. `make test` builds it once for
// every suite and names it in IDEMGATE_BIN.
func idemgateBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("IDEMGATE_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idemgate-openapi-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "idemgate")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		cmd := exec.Command(goTool, "build", "-o", binPath, "../../cmd/idemgate")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// countingUpstream answers every request 201 with a JSON body numbering
// the executions of the operation named by its X-Test-Op header.
type countingUpstream struct {
	mu   sync.Mutex     // protects runs
	runs map[string]int // X-Test-Op → executions
}

func (u *countingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	u.mu.Lock()
	u.runs[r.Header.Get("X-Test-Op")]++
	n := u.runs[r.Header.Get("X-Test-Op")]
	u.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"data":{"op":%q,"path":%q,"run":%d}}`, r.Header.Get("X-Test-Op"), r.URL.Path, n)
}

func (u *countingUpstream) count(op string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.runs[op]
}

// startIdemgate runs the binary with config and returns its public
// address; it stops when the test ends.
func startIdemgate(t *testing.T, config []byte) string {
	t.Helper()
	bin := idemgateBinary(t)
	cfgPath := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(cfgPath, config, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config", cfgPath, "--log-flush", "0", "--grace", "1s")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	var logs testutil.SyncBuffer
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(&logs, pw)
	cmd.Stdout = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		pw.Close()
		if t.Failed() {
			t.Logf("idemgate log:\n%s", logs.String())
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct {
				Msg    string `json:"msg"`
				Listen string `json:"listen"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "idemgate started" {
				addr <- line.Listen
				break
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		return a
	case <-time.After(60 * time.Second):
		t.Fatalf("idemgate did not start:\n%s", logs.String())
		return ""
	}
}

// sampleFor is t with each parameter replaced by a value.
func sampleFor(t *pathtmpl.Template) string {
	segs := strings.Split(t.String(), "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") {
			segs[i] = fmt.Sprintf("v%d", i)
		}
	}
	return strings.Join(segs, "/")
}

// TestRoundTrip: for each document, the imported routes run in idemgate in
// front of a counting upstream, and every write operation of the document
// is protected: a keyed request runs once upstream, and its duplicate is a
// replay of the same answer. One request pair per operation keeps the 88
// writes of Harbor cheap.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"testdata/petstore2/petstore.json", "testdata/petstore3/openapi.yaml", "testdata/ucp/ucp.yaml", "testdata/harbor/swagger.yaml"} {
		t.Run(filepath.Base(filepath.Dir(spec)), func(t *testing.T) {
			t.Parallel()
			loaded, err := LoadSpec(spec)
			if err != nil {
				t.Fatal(err)
			}
			res := Import(loaded, Options{})
			up := &countingUpstream{runs: map[string]int{}}
			upstream := httptest.NewServer(up)
			t.Cleanup(upstream.Close)
			cfg, dropped := knownOnly(t, Render(loaded, res), map[string]any{
				"listen":       "127.0.0.1:0",
				"admin_listen": "127.0.0.1:0",
				"upstream":     map[string]any{"url": upstream.URL},
				"edge_limit":   map[string]any{"rate": 0},
			})
			if len(dropped) > 0 {
				t.Logf("keys this build's config does not have yet, left out: %v", dropped)
			}
			base := "http://" + startIdemgate(t, cfg)
			requireKey := map[string]bool{}
			for _, r := range res.Routes {
				requireKey[r.Method+" "+r.Path] = r.RequireKey
			}
			client := &http.Client{Timeout: 10 * time.Second}
			send := func(method, path, op, key string) (int, http.Header, []byte) {
				t.Helper()
				req, err := http.NewRequest(method, base+path, strings.NewReader(`{"n":1}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Test-Op", op)
				req.Header.Set("UCP-Agent", `profile="https://platform.example.com/.well-known/ucp"`)
				req.Header.Set("Authorization", "Bearer roundtrip-client") // the default identity source (require_identity)
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header, body
			}
			writes := 0
			for _, p := range sortedPaths(loaded.Doc.Paths) {
				for m := range loaded.Doc.Paths.Value(p).Operations() {
					if !writeMethods[m] {
						continue
					}
					writes++
					ptr := "#/paths/" + escapePointer(p) + "/" + strings.ToLower(m)
					cp, err := ConvertPath(im0BasePath(loaded), p)
					if err != nil {
						t.Fatalf("%s: %v", ptr, err)
					}
					tmpl := pathtmpl.MustParse(cp.Template)
					path := sampleFor(tmpl)
					key := fmt.Sprintf("k-%d", writes)
					s1, h1, b1 := send(m, path, ptr, key)
					s2, h2, b2 := send(m, path, ptr, key)
					switch {
					case s1 != http.StatusCreated || h1.Get("Idempotent-Replayed") != "":
						t.Errorf("%s: %s %s first = %d replayed=%q %s; want 201, not a replay", ptr, m, path, s1, h1.Get("Idempotent-Replayed"), b1)
					case s2 != http.StatusCreated || h2.Get("Idempotent-Replayed") != "true" || !bytes.Equal(b1, b2):
						t.Errorf("%s: %s %s duplicate = %d replayed=%q %s; want the first answer replayed (%s)", ptr, m, path, s2, h2.Get("Idempotent-Replayed"), b2, b1)
					case up.count(ptr) != 1:
						t.Errorf("%s: upstream ran %d times; want 1", ptr, up.count(ptr))
					}
					if requireKey[m+" "+cp.Template] {
						if s, _, b := send(m, path, ptr+"#nokey", ""); s != http.StatusBadRequest || !bytes.Contains(b, []byte("idempotency_key_missing")) {
							t.Errorf("%s: without a key = %d %s; want 400 idempotency_key_missing", ptr, s, b)
						}
					}
				}
			}
			if writes != res.Writes || writes == 0 {
				t.Errorf("sent %d write operations; the document has %d", writes, res.Writes)
			}
			t.Logf("%d write operations, each protected (%d requests)", writes, 2*writes)
		})
	}
}

// im0BasePath is the document-level base path, as Import applies it.
func im0BasePath(s *Spec) string {
	im := &importer{spec: s, res: &Result{}, names: map[string]string{}}
	return im.basePath(s.Doc.Servers, "#/servers", "")
}
