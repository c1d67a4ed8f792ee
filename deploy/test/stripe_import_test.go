package deploytest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// stripeMock is the stripe-mock module whose embedded OpenAPI documents
// (Stripe's API, 8 MB, and its beta SDK variant, 14 MB) the importer is
// measured on. Fetched through the Go module proxy at test time into the
// module cache, never committed.
const stripeMock = "github.com/stripe/stripe-mock@v0.203.0"

// maxImportRSS is the importer's peak memory budget for Stripe's documents
// (issue 30: at most 200 MB; it peaked at 483 MB and 805 MB before the
// document was slimmed, about 75 MB and 91 MB after: BENCHMARKS.md).
const maxImportRSS = 200 << 20

// TestImportStripeMemory runs `idemgate routes import` on Stripe's OpenAPI
// documents and checks the routes and the process' peak resident memory
// (the kernel's ru_maxrss of the child). It skips when the module cannot be
// downloaded (no Go module proxy).
func TestImportStripeMemory(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "mod", "download", "-json", stripeMock)
	cmd.Dir = t.TempDir() // outside any module: download only
	cmd.Env = append(cleanEnv(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("go mod download %s: %v (no module proxy?)", stripeMock, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Skipf("go mod download %s: %s %v", stripeMock, mod.Error, err)
	}
	bin := idemgateBinary(t)
	for _, tc := range []struct {
		file      string
		minRoutes int
	}{
		{"spec3.json", 300},          // 329 writes in v0.203.0
		{"spec3.beta.sdk.json", 300}, // more
	} {
		t.Run(tc.file, func(t *testing.T) {
			spec := filepath.Join(mod.Dir, "embedded", "openapi", tc.file)
			if _, err := os.Stat(spec); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			imp := exec.Command(bin, "routes", "import", "--strict", spec)
			imp.Env = cleanEnv()
			imp.Stdout, imp.Stderr = &stdout, &stderr
			if err := imp.Run(); err != nil {
				t.Fatalf("routes import %s: %v\n%s", tc.file, err, stderr.String())
			}
			if n := strings.Count(stdout.String(), "\n  - name: "); n < tc.minRoutes {
				t.Errorf("%d routes; want at least %d", n, tc.minRoutes)
			}
			for _, want := range []string{"name: PostCustomers\n", "path: /v1/customers/{customer}\n", "method: DELETE\n"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("routes lack %q", want)
				}
			}
			ru, ok := imp.ProcessState.SysUsage().(*syscall.Rusage)
			if !ok {
				t.Skip("no rusage on this platform")
			}
			rss := ru.Maxrss << 10 // kilobytes on Linux
			t.Logf("%s: peak RSS %d MB, %.2fs user", tc.file, rss>>20, float64(ru.Utime.Sec)+float64(ru.Utime.Usec)/1e6)
			if rss > maxImportRSS {
				t.Errorf("routes import of %s peaked at %d MB; want at most %d MB", tc.file, rss>>20, maxImportRSS>>20)
			}
		})
	}
}
