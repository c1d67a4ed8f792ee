package app

import (
	"fmt"
	"log/slog"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/session"
	"github.com/idemgate/idemgate/session/redislock"
)

// newQueue makes the session queue when a route names a session (DESIGN.md
// step 6), nil otherwise. With the Redis store, turns also take a lease
// lock in the same Redis, through a client of its own. It pushes its
// closers onto cs: the locker stops its renewals and subscription before
// its client closes.
func newQueue(cfg *config.Config, rt *redisstore.Timeout, log *slog.Logger, m session.Metrics, cs *closeStack) (*session.Queue, error) {
	used := false
	for _, r := range cfg.Routes {
		used = used || r.Session != nil
	}
	if !used {
		return nil, nil
	}
	log = log.With("component", "session")
	qopts := session.Options{
		QueueDepth:   cfg.Sessions.QueueDepth,
		QueueTimeout: cfg.Sessions.QueueTimeout,
		Metrics:      m,
		Logger:       log,
	}
	if cfg.Store.Backend == config.StoreRedis {
		client, err := newRedisClient(cfg.Store.Redis, rt, cs)
		if err != nil {
			return nil, err
		}
		locker, err := redislock.New(client, redislock.Options{KeyPrefix: cfg.Store.Redis.KeyPrefix, Lease: cfg.Sessions.Lease, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("store.redis: %w", err)
		}
		cs.push(locker.Close)
		qopts.Locker = locker
	}
	q, err := session.New(qopts)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	return q, nil
}
