package app

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore/redisstore"
)

// newRedisClient is the one place a Redis client is made from the config.
// The store, the Redis limiters and the session locks each get their own
// client (so that a flood of limiter calls cannot starve the claims of
// connections, and the locks' subscription holds a connection for good),
// all with the same options, and all bounded by live, the app's one
// store.redis.timeout, which a reload sets (applyLive). It pushes the
// client's Close onto cs.
func newRedisClient(rc config.Redis, live *redisstore.Timeout, cs *closeStack) (redis.UniversalClient, error) {
	client, err := redisstore.NewClient(redisstore.ClientOptions{
		Addrs:            rc.Addrs,
		MasterName:       rc.MasterName,
		Username:         rc.Username,
		Password:         rc.Password,
		SentinelUsername: rc.SentinelUsername,
		SentinelPassword: rc.SentinelPassword,
		DB:               rc.DB,
		LiveTimeout:      live,
	})
	if err != nil {
		return nil, fmt.Errorf("store.redis: %w", err)
	}
	cs.push(client.Close)
	return client, nil
}
