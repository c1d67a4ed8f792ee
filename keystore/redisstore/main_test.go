package redisstore

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestMain silences go-redis's process-wide logger, which the dead-server
// tests would flood with dial errors. (The proxy routes it to its own
// logger in cmd.)
func TestMain(m *testing.M) {
	redis.SetLogger(testutil.DiscardLogger{})
	m.Run()
}
