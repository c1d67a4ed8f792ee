package memlimit

import (
	"os"
	"testing"
)

// unsetenv unsets key for the test (t.Setenv can only set), restoring it
// after.
func unsetenv(t *testing.T, key string) {
	t.Helper()
	if v, ok := os.LookupEnv(key); ok {
		t.Cleanup(func() { os.Setenv(key, v) })
	}
	os.Unsetenv(key)
}
