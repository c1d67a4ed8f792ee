package app

import (
	"strings"
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
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "one") {
		if time.Now().After(deadline) {
			t.Fatal("a buffered line was not flushed within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Write([]byte("two\n"))
	b.Close()
	b.Close()
	if got := out.String(); got != "one\ntwo\n" {
		t.Errorf("logged %q; want %q", got, "one\ntwo\n")
	}
}
