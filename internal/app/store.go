package app

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/keystore/sealed"
)

// pinger is a store that can say whether its backend answers (/healthz).
type pinger interface{ Ping(context.Context) error }

// builtStore is what newStore makes: the store, what /healthz pings (nil
// for the memory store) and the store's Redis client (nil without Redis),
// which the ACME storage shares.
type builtStore struct {
	store  keystore.Store
	ping   pinger
	client redis.UniversalClient
	// notices carry completion notices between replicas (nil: the
	// proxy's in-process hub).
	notices keystore.Notices
	mem     *memstore.Store // the memory store, for its gauges; nil with Redis
}

// newStore opens the idempotency store cfg names (store.backend), sealed
// when idempotency.encryption_key_env is set, and pushes its closers onto
// cs: the store closes before its client.
func newStore(cfg *config.Config, cs *closeStack) (builtStore, error) {
	var b builtStore
	switch cfg.Store.Backend {
	case config.StoreRedis:
		client, err := newRedisClient(cfg.Store.Redis, cs)
		if err != nil {
			return b, err
		}
		s, err := redisstore.New(client, redisstore.Options{KeyPrefix: cfg.Store.Redis.KeyPrefix})
		if err != nil {
			return b, fmt.Errorf("store.redis: %w", err)
		}
		n := redisstore.NewNotices(client, cfg.Store.Redis.KeyPrefix, nil)
		cs.push(n.Close) // before the client
		b.store, b.ping, b.client, b.notices = s, s, client, n
	default:
		b.mem = memstore.New(memstore.Options{
			MaxEntries: cfg.Store.Memory.MaxEntries,
			MaxBytes:   cfg.Store.Memory.MaxBytes,
		})
		b.store = b.mem
	}
	cs.push(b.store.Close)
	if env := cfg.Idempotency.EncryptionKeyEnv; env != "" {
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return b, fmt.Errorf("idempotency.encryption_key_env: environment variable %s is not set", env)
		}
		key, err := sealed.ParseKey(v)
		if err != nil {
			return b, fmt.Errorf("idempotency.encryption_key_env: %s: %w", env, err)
		}
		s, err := sealed.New(b.store, key)
		if err != nil {
			return b, fmt.Errorf("idempotency.encryption_key_env: %w", err)
		}
		b.store = s // its Close is the wrapped store's, pushed above
	}
	return b, nil
}
