package redisstore

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis's process-wide logger, which the dead-server
// tests would flood with dial errors. (The proxy routes it to its own
// logger in cmd.)
func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{})
	m.Run()
}
