package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/compressed"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/keystore/replaycache"
	"github.com/idemgate/idemgate/keystore/sealed"
)

// pinger is a store that can say whether its backend answers (/healthz).
type pinger interface{ Ping(context.Context) error }

// builtStore is what newStore makes: the store, what /healthz pings (nil
// for the memory store), the store's Redis client (nil without Redis),
// which the ACME storage shares, what reports store resets, the Redis
// store itself (nil without Redis) and the replay cache (nil unless on).
type builtStore struct {
	store  keystore.Store
	ping   pinger
	client redis.UniversalClient
	// notices carry completion notices between replicas (nil: the
	// proxy's in-process hub).
	notices keystore.Notices
	epoch   keystore.EpochReporter
	redis   *redisstore.Store
	cache   *replaycache.Store
	mem     *memstore.Store // the memory store, for its gauges; nil with Redis
	// compressed compresses answers (store.compression) and opens
	// compressed ones whatever the setting; reloads Set it.
	compressed *compressed.Store
	// sealed seals answers with idempotency.encryption_key_env's key and
	// opens what that key or one before it sealed; sealKeys are its keys,
	// the current first (the zero Key while it does not seal). A reload
	// sets both (sealKeysFor); reload.mu protects sealKeys.
	sealed   *sealed.Store
	sealKeys []sealed.Key
}

// purgeCache empties the replay cache, if there is one. A store reset
// (redisstore's epoch watcher, EpochOptions.OnReset) calls it: answers the
// store lost are then no longer replayed from this process either.
func (b *builtStore) purgeCache() {
	if b.cache != nil {
		b.cache.Purge()
	}
}

// openCacheBytes is what the compressing store keeps of the answers it
// opened last, when no replay cache sits above it (the memory store, or
// Redis without store.redis.replay_cache): a replay of a compressed 4 KB
// answer then decodes it once, not on every retry (issue 31).
const openCacheBytes = 8 << 20

// compression is what the compressing store runs with under cfg
// (store.compression, reloaded live; the bound of what it opens is
// idempotency.max_response_bytes).
func compression(cfg *config.Config) compressed.Options {
	o := compressed.Options{
		Compress:     cfg.Store.Compression == config.CompressionZstd,
		MaxBodyBytes: cfg.Idempotency.MaxResponseBytes,
	}
	if cfg.Store.Backend != config.StoreRedis || !cfg.Store.Redis.ReplayCache.Enabled() {
		o.OpenCacheBytes = openCacheBytes
	}
	return o
}

// recordFormat is the Redis store's record format in cfg
// (store.redis.record_format; reloaded live).
func recordFormat(cfg *config.Config) redisstore.RecordFormat {
	if cfg.Store.Redis.RecordFormat == config.RecordHash {
		return redisstore.FormatHash
	}
	return redisstore.FormatCompact
}

// newStore opens the idempotency store cfg names (store.backend), sealed
// when idempotency.encryption_key_env is set, and pushes its closers onto
// cs: the epoch watcher closes before the store, the store before its
// client. With Redis it logs the startup check's findings as warnings
// (never refusing to start: unkeyed traffic must flow while Redis is down)
// and watches the store's epoch marker (DESIGN.md, Store loss); a reset
// empties the replay cache. The compressing store (store.compression)
// wraps the (sealed) store. With store.redis.replay_cache on, the replay
// cache wraps that: it holds opened answers, so a cached
// replay is neither fetched nor decrypted, and the admin API's repairs,
// which go through it, drop the key on every replica. The caller's metrics
// decorator wraps the result, so every Reserve is counted, cached or not
// (the cache counts its own hits, idemgate_replay_cache_*).
func newStore(cfg *config.Config, rt *redisstore.Timeout, log *slog.Logger, cs *closeStack) (builtStore, error) {
	var b builtStore
	switch cfg.Store.Backend {
	case config.StoreRedis:
		client, err := newRedisClient(cfg.Store.Redis, rt, cs)
		if err != nil {
			return b, err
		}
		s, err := redisstore.New(client, redisstore.Options{
			KeyPrefix:    cfg.Store.Redis.KeyPrefix,
			DirectCalls:  !cfg.Store.Redis.AutoPipeline,
			RecordFormat: recordFormat(cfg),
			Timeout:      rt,
		})
		if err != nil {
			return b, fmt.Errorf("store.redis: %w", err)
		}
		n := redisstore.NewNotices(client, cfg.Store.Redis.KeyPrefix, nil)
		cs.push(n.Close) // before the client
		b.store, b.ping, b.client, b.notices, b.redis = s, s, client, n, s
		cs.push(b.store.Close)
		checkRedis(client, s, cfg.Store.Redis.Timeout, log)
		w := s.WatchEpoch(redisstore.EpochOptions{OnReset: func(r redisstore.Reset) {
			log.Error("the idempotency store was emptied (its epoch marker vanished): a restart without persistence, a failover to an empty replica or FLUSHALL; retries of writes claimed before it run again",
				"component", "store", "marker", r.Marker, "previous_epoch", r.Previous, "epoch", r.Current)
			b.purgeCache()
		}})
		cs.push(w.Close)
		b.epoch = w
	default:
		b.mem = memstore.New(memstore.Options{
			MaxEntries: cfg.Store.Memory.MaxEntries,
			MaxBytes:   cfg.Store.Memory.MaxBytes,
		})
		b.store, b.epoch = b.mem, b.mem
		cs.push(b.store.Close)
	}
	// Always there, under the compressing store (it seals what that
	// compressed): a reload may turn sealing on, rotate its key or turn it
	// off (sealKeysFor).
	var key sealed.Key
	if env := cfg.Idempotency.EncryptionKeyEnv; env != "" {
		var err error
		if key, err = sealingKey(env); err != nil {
			return b, err
		}
	}
	s, err := sealed.Wrap(b.store)
	if err == nil {
		err = s.SetKeys(key)
	}
	if err != nil {
		return b, fmt.Errorf("idempotency.encryption_key_env: %w", err)
	}
	b.store, b.sealed, b.sealKeys = s, s, []sealed.Key{key} // its Close is the wrapped store's, pushed above
	// Always there, above the sealed store (it compresses plaintext):
	// with store.compression none it still opens compressed records that
	// replicas with zstd wrote.
	c, err := compressed.New(b.store, compression(cfg))
	if err != nil {
		return b, fmt.Errorf("store.compression: %w", err)
	}
	b.store, b.compressed = c, c // its Close is the wrapped store's
	if rc := cfg.Store.Redis.ReplayCache; b.redis != nil && rc.Enabled() {
		b.cache = replaycache.New(b.store, replaycache.Options{
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

// sealingKey reads the sealing key from the environment variable env
// (idempotency.encryption_key_env): the process's environment, which a
// reload reads too but cannot add to (a Kubernetes Secret's env vars reach
// a container when it starts).
func sealingKey(env string) (sealed.Key, error) {
	v, ok := os.LookupEnv(env)
	if !ok || v == "" {
		return sealed.Key{}, fmt.Errorf("idempotency.encryption_key_env: environment variable %s is not set", env)
	}
	key, err := sealed.ParseKey(v)
	if err != nil {
		return sealed.Key{}, fmt.Errorf("idempotency.encryption_key_env: %s: %w", env, err)
	}
	return key, nil
}

// sealKeysFor returns the sealing keys under next when its
// idempotency.encryption_key_env differs from running's: next's key first
// (the zero Key when it names none: sealing off), then every key this
// process sealed with before, so that the answers they sealed still open.
// It returns nil when the key does not change, and an error (the reload is
// refused) when the variable is not set or is not a key. reload.mu is
// held.
func (b *builtStore) sealKeysFor(running, next *config.Config) ([]sealed.Key, error) {
	env := next.Idempotency.EncryptionKeyEnv
	if env == running.Idempotency.EncryptionKeyEnv {
		return nil, nil
	}
	var key sealed.Key
	if env != "" {
		var err error
		if key, err = sealingKey(env); err != nil {
			return nil, err
		}
	}
	keys := []sealed.Key{key}
	for _, k := range b.sealKeys {
		if k != (sealed.Key{}) && k != key {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// checkRedis runs the startup check (redisstore.Check) on client, bounded
// by the store's timeout, and logs each finding as a warning. It then loads
// s's functions and scripts (redisstore's LoadScripts), so that the first
// keyed write is two round trips, as every other; a failure is logged, and
// the first calls load them. A Redis that refuses functions is logged.
func checkRedis(client redis.UniversalClient, s *redisstore.Store, timeout time.Duration, log *slog.Logger) {
	if timeout <= 0 {
		timeout = 500 * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, f := range redisstore.Check(ctx, client) {
		log.Warn("redis: "+f.Detail, "component", "store", "problem", f.Problem, "server", f.Server)
	}
	if err := s.LoadScripts(ctx); err != nil {
		log.Info("redis: scripts not loaded at start; the first calls load them", "component", "store", "error", err)
	}
	if !s.Functions() {
		log.Info("redis: Redis refuses functions (FCALL or FUNCTION LOAD: a Redis before 7.0, or an ACL user without them); the store runs its scripts with EVALSHA, about a fifth more of Redis's time per keyed write", "component", "store")
	}
}
