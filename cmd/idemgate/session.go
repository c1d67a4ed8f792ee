package main

import (
	"fmt"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/session"
	"github.com/idemgate/idemgate/session/redislock"
)

// buildSessions puts the session-turn stage into opts when a route names a
// session (DESIGN.md step 6). With the Redis store, turns also take a lease
// lock in the same Redis, through a client of its own built with the
// store's options (its subscription holds a connection for good). What it
// opens goes to a.closers, in closing order (a reload builds on a copy of
// the app and keeps them).
func (a *app) buildSessions(opts *proxy.Options) error {
	cfg := a.cfg
	used := false
	for _, r := range cfg.Routes {
		used = used || r.Session != nil
	}
	if !used {
		return nil
	}
	qopts := session.Options{
		QueueDepth:   cfg.Sessions.QueueDepth,
		QueueTimeout: cfg.Sessions.QueueTimeout,
		Metrics:      a.metrics.Session(), // NopMetrics when there are none
		Logger:       a.log.With("component", "session"),
	}
	if cfg.Store.Backend == config.StoreRedis {
		rc := cfg.Store.Redis
		client, err := redisstore.NewClient(redisstore.ClientOptions{
			Addrs:      rc.Addrs,
			MasterName: rc.MasterName,
			Username:   rc.Username,
			Password:   rc.Password,
			DB:         rc.DB,
			Timeout:    rc.Timeout,
		})
		if err != nil {
			return fmt.Errorf("store.redis: %w", err)
		}
		a.closers = append(a.closers, client.Close)
		locker, err := redislock.New(client, redislock.Options{
			KeyPrefix: rc.KeyPrefix,
			Logger:    a.log.With("component", "session"),
		})
		if err != nil {
			return fmt.Errorf("store.redis: %w", err)
		}
		// The locker stops its renewals and subscription before its
		// client closes.
		a.closers = append(a.closers[:len(a.closers)-1], locker.Close, client.Close)
		qopts.Locker = locker
	}
	q, err := session.New(qopts)
	if err != nil {
		return fmt.Errorf("sessions: %w", err)
	}
	opts.Stages.Sessions = q
	return nil
}
