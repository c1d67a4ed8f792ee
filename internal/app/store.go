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
	"github.com/idemgate/idemgate/keystore/replaycache"
	"github.com/idemgate/idemgate/keystore/sealed"
)

// pinger is a store that can say whether its backend answers (/healthz).
type pinger interface{ Ping(context.Context) error }

// builtStore is what newStore makes: the store, what /healthz pings (nil
// for the memory store), the store's Redis client (nil without Redis),
// which the ACME storage shares, the Redis store itself (nil without
// Redis; its epoch can be watched) and the replay cache (nil unless on).
type builtStore struct {
	store  keystore.Store
	ping   pinger
	client redis.UniversalClient
	redis  *redisstore.Store
	cache  *replaycache.Store
}

// purgeCache empties the replay cache, if there is one. A store reset
// (redisstore's epoch watcher, EpochOptions.OnReset) calls it: answers the
// store lost are then no longer replayed from this process either.
func (b builtStore) purgeCache() {
	if b.cache != nil {
		b.cache.Purge()
	}
}

// newStore opens the idempotency store cfg names (store.backend), sealed
// when idempotency.encryption_key_env is set, and pushes its closers onto
// cs: the store closes before its client. With Redis and
// store.redis.replay_cache on, the replay cache wraps the (sealed) store:
// it holds opened answers, so a cached replay is neither fetched nor
// decrypted, and the admin API's repairs, which go through it, drop the
// key on every replica. The caller's metrics decorator wraps the result,
// so every Reserve is counted, cached or not (the cache counts its own
// hits, idemgate_replay_cache_*).
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
		b.store, b.ping, b.client, b.redis = s, s, client, s
	default:
		b.store = memstore.New(memstore.Options{
			MaxEntries: cfg.Store.Memory.MaxEntries,
			MaxBytes:   cfg.Store.Memory.MaxBytes,
		})
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
	if rc := cfg.Store.Redis.ReplayCache; b.redis != nil && rc.Enabled() {
		claims, ok := b.store.(keystore.ClaimStore)
		if !ok {
			return b, fmt.Errorf("store.redis.replay_cache: the store (%T) has no claim operations", b.store)
		}
		b.cache = replaycache.New(claims, replaycache.Options{
			MaxEntries:  rc.MaxEntries,
			MaxBytes:    rc.MaxBytes,
			Invalidator: b.redis,
		})
		b.store = b.cache
		// Before the Redis client closes: the subscription ends first.
		// The wrapped store's Close, which it calls too, is idempotent.
		cs.push(b.cache.Close)
	}
	return b, nil
}
