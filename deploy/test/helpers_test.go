package deploytest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the main module's directory: this module lives in deploy/test.
var repoRoot = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}()

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// idemgateBinary returns $IDEMGATE_BIN (make test builds bin/idemgate once
// for every suite and sets it) or $DEPLOYTEST_IDEMGATE_BIN, a binary built
// elsewhere (a release, say); without either, it builds cmd/idemgate from
// this repository once per test run.
func idemgateBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		for _, v := range []string{"IDEMGATE_BIN", "DEPLOYTEST_IDEMGATE_BIN"} {
			if p := os.Getenv(v); p != "" {
				binPath = p
				return
			}
		}
		binDir, binErr = os.MkdirTemp("", "idemgate-deploytest-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "idemgate")
		cmd := exec.Command("go", "build", "-trimpath", "-o", binPath, "./cmd/idemgate")
		cmd.Dir = repoRoot
		cmd.Env = cleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/idemgate: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// cleanEnv is the environment without IDEMGATE_* variables, which would
// override the config under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "IDEMGATE_") {
			env = append(env, kv)
		}
	}
	return env
}

// validateConfig runs `idemgate validate` on a config file's content and
// returns its output; a refused config fails the test.
func validateConfig(t *testing.T, name, content string) string {
	t.Helper()
	bin := idemgateBinary(t)
	path := filepath.Join(t.TempDir(), "idemgate.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "validate", "--config", path)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: idemgate validate refused the config: %v\n%s\nconfig:\n%s", name, err, stderr.String(), content)
	}
	return stdout.String()
}
