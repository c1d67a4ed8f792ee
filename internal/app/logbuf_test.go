package app

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
)

func TestLogBuffer(t *testing.T) {
	t.Parallel()
	var out testutil.SyncBuffer
	b := NewLogBuffer(&out, 1<<16, 20*time.Millisecond)
	b.Write([]byte("one\n"))
	// Flushed by the interval, without Close.
	testutil.Eventually(t, 5*time.Second, "the buffered line flushed", func() bool { return strings.Contains(out.String(), "one") })
	b.Write([]byte("two\n"))
	b.Close()
	b.Close()
	if got := out.String(); got != "one\ntwo\n" {
		t.Errorf("logged %q; want %q", got, "one\ntwo\n")
	}
}

// logbufHelperEnv makes TestLogBufferHelper the child process of
// TestLogBufferKilled: it names the file to log to.
const logbufHelperEnv = "IDEMGATE_LOGBUF_HELPER_FILE"

// TestLogBufferHelper is not a test: run by TestLogBufferKilled as a child
// process, it logs through a LogBuffer (flush interval from
// IDEMGATE_LOGBUF_HELPER_EVERY), says "written" on stdout and waits to be
// killed.
func TestLogBufferHelper(t *testing.T) {
	path := os.Getenv(logbufHelperEnv)
	if path == "" {
		t.Skip("child process of TestLogBufferKilled")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	every, err := time.ParseDuration(os.Getenv("IDEMGATE_LOGBUF_HELPER_EVERY"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(NewLogBuffer(f, 1<<16, every), nil))
	for i := range 100 {
		log.Info("request", "n", i, "level_in_a_value", `"level":"ERROR"`)
	}
	if os.Getenv("IDEMGATE_LOGBUF_HELPER_ERROR") != "" {
		log.Error("store unreachable")
		for i := range 5 {
			log.Info("after the error", "n", i)
		}
	}
	fmt.Println("written")
	select {} // until killed
}

// TestLogBufferKilled: a process killed with SIGKILL (no defer, no Close
// runs) has on disk every line up to its last WARN or ERROR line, at once,
// and its INFO lines within the flush interval; what it may lose is the
// INFO lines of the last interval (here, with an interval of an hour, the 5
// after the error: lines whose level only appears in an attribute stay
// buffered).
func TestLogBufferKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		every     string
		withError bool
		want      int // lines on disk
	}{
		{"error line flushes at once", "1h", true, 101},
		{"info lines within the interval", "50ms", false, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "log")
			cmd := exec.Command(os.Args[0], "-test.run=^TestLogBufferHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), logbufHelperEnv+"="+path, "IDEMGATE_LOGBUF_HELPER_EVERY="+tc.every)
			if tc.withError {
				cmd.Env = append(cmd.Env, "IDEMGATE_LOGBUF_HELPER_ERROR=1")
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "written\n" {
				t.Fatalf("child said %q, %v", line, err)
			}
			lines := func() int {
				b, _ := os.ReadFile(path)
				return bytes.Count(b, []byte("\n"))
			}
			if !tc.withError {
				// Bounded wait for the interval's flush (a loaded machine
				// may run the child's ticker late), then the kill.
				deadline := time.Now().Add(10 * time.Second)
				for lines() < tc.want && time.Now().Before(deadline) {
					time.Sleep(10 * time.Millisecond)
				}
			}
			cmd.Process.Signal(syscall.SIGKILL)
			cmd.Wait()
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Count(b, []byte("\n")); got != tc.want {
				t.Errorf("%d lines on disk after SIGKILL; want %d:\n%s", got, tc.want, b)
			}
			if tc.withError && !bytes.Contains(b, []byte(`"msg":"store unreachable"`)) {
				t.Errorf("the error line is not on disk")
			}
		})
	}
}

// urgentFour is urgent as it was, four searches of the line's head: the
// definition urgent must keep.
func urgentFour(p []byte) bool {
	head := p[:min(len(p), levelScan)]
	for _, lv := range [][]byte{[]byte(`"level":"WARN`), []byte(`"level":"ERROR`), []byte(" level=WARN"), []byte(" level=ERROR")} {
		if bytes.Contains(head, lv) {
			return true
		}
	}
	return false
}

// TestLogBufferUrgent: which lines are flushed at once (the WARN and ERROR
// lines of slog's JSON and text handlers), and which are not, as urgent
// and the four searches it replaced both say.
func TestLogBufferUrgent(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", levelScan)
	for _, tc := range []struct {
		name string
		line string
		want bool
	}{
		{"JSON ERROR", `{"time":"2026-12-01T20:00:00Z","level":"ERROR","msg":"x"}`, true},
		{"JSON WARN", `{"time":"2026-12-01T20:00:00Z","level":"WARN","msg":"x"}`, true},
		{"JSON ERROR+2", `{"time":"2026-12-01T20:00:00Z","level":"ERROR+2","msg":"x"}`, true},
		{"JSON WARN+1", `{"time":"2026-12-01T20:00:00.123456789Z","level":"WARN+1","msg":"x"}`, true},
		{"JSON without time", `{"level":"WARN","msg":"x"}`, true},
		{"text WARN", `time=2026-12-01T20:00:00Z level=WARN msg=x`, true},
		{"text ERROR", `time=2026-12-01T20:00:00.000Z level=ERROR msg="store down"`, true},
		{"JSON INFO", `{"time":"2026-12-01T20:00:00Z","level":"INFO","msg":"x"}`, false},
		{"JSON DEBUG", `{"time":"2026-12-01T20:00:00Z","level":"DEBUG","msg":"x"}`, false},
		{"JSON INFO+2", `{"time":"2026-12-01T20:00:00Z","level":"INFO+2","msg":"x"}`, false},
		{"text INFO", `time=2026-12-01T20:00:00Z level=INFO msg=x`, false},
		{"text without time: no space before level", `level=WARN msg=x`, false},
		{"level in a value past the head", `{"time":"2026-12-01T20:00:00Z","level":"INFO","msg":"request","route":"create_cart","path":"/a/very/long/path/to/push/the/value/out","h":"\"level\":\"ERROR\""}`, false},
		{"level in an escaped JSON value", `{"level":"INFO","msg":"\"level\":\"ERROR\""}`, false},
		{"level in a quoted text message", `time=2026-12-01T20:00:00Z level=INFO msg="a level=WARN b"`, true},
		{"level word twice, the second WARN", `{"level_x":"a","level":"WARN"}`, true},
		{"pattern cut by the head", long[:levelScan-12] + `"level":"WARN"}`, false},
		{"pattern ends at the head", long[:levelScan-13] + `"level":"WARN"}`, true},
		{"ERROR pattern cut by the head", long[:levelScan-13] + `"level":"ERROR"}`, false},
		{"WARNING", `{"level":"WARNING"}`, true},
		{"level alone", `level`, false},
		{"empty", ``, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := urgent([]byte(tc.line)); got != tc.want {
				t.Errorf("urgent(%s) = %v; want %v", tc.line, got, tc.want)
			}
			if got := urgentFour([]byte(tc.line)); got != tc.want {
				t.Errorf("four searches(%s) = %v; want %v", tc.line, got, tc.want)
			}
		})
	}
}

// TestLogBufferUrgentSame: urgent agrees with the four searches on random
// lines made of the pieces that matter (every way the patterns can start,
// overlap and be cut by the head).
func TestLogBufferUrgentSame(t *testing.T) {
	t.Parallel()
	pieces := []string{`"`, ` `, `level`, `":"`, `=`, `WARN`, `ERROR`, `INFO`, `"level":"`, ` level=`, `x`, `levellevel`, `:`, strings.Repeat("y", 17)}
	rng := rand.New(rand.NewPCG(31, 0))
	for range 200000 {
		var b []byte
		for range rng.IntN(30) {
			b = append(b, pieces[rng.IntN(len(pieces))]...)
		}
		if got, want := urgent(b), urgentFour(b); got != want {
			t.Fatalf("urgent(%q) = %v; the four searches say %v", b, got, want)
		}
	}
}

// BenchmarkLogBufferUrgent: the level check of an access-log line.
//
//	go test -run '^$' -bench LogBufferUrgent ./internal/app/
func BenchmarkLogBufferUrgent(b *testing.B) {
	line := []byte(`{"time":"2026-12-02T07:18:36.307743148Z","level":"INFO","msg":"request","component":"proxy","host":"127.0.0.1:36713","method":"GET","path":"/pay"}` + "\n")
	for _, bc := range []struct {
		name string
		f    func([]byte) bool
	}{{"four searches", urgentFour}, {"urgent", urgent}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if bc.f(line) {
					b.Fatal("urgent")
				}
			}
		})
	}
}
