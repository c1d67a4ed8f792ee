package app

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore/redisstore"
)

// redisLogEvery is the least time between two log lines of one go-redis
// message (a failed dial is logged for every attempt while Redis is down).
const redisLogEvery = 10 * time.Second

// SetRedisLogger sends go-redis's logs (pool and dial trouble) into log,
// one line per message every redisLogEvery with a count of those left
// out. go-redis has one logger per process (redis.SetLogger), so main sets
// it once, before [New]: an App that set it would undo the logger of every
// other App in the process (tests build many).
func SetRedisLogger(log *slog.Logger) {
	redis.SetLogger(&redisstore.Logger{L: log.With("component", "redis"), Every: redisLogEvery})
}
