package app

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestMain silences go-redis's process-wide logger, which main sets with
// SetRedisLogger and the tests with dead or killed servers would flood.
func TestMain(m *testing.M) {
	redis.SetLogger(testutil.DiscardLogger{})
	m.Run()
}
