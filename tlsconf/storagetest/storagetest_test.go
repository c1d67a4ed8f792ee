package storagetest_test

import (
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/idemgate/idemgate/tlsconf/storagetest"
)

// TestFileStorage runs the suite against certmagic's own FileStorage, so
// that the suite asks for what certmagic actually does.
func TestFileStorage(t *testing.T) {
	t.Parallel()
	storagetest.Run(t, func(t *testing.T) storagetest.Opener {
		dir := t.TempDir()
		return func(*testing.T) certmagic.Storage { return &certmagic.FileStorage{Path: dir} }
	}, storagetest.Options{LockWait: 5 * time.Second, Lockers: 2}) // FileStorage polls locks every second
}
