package main

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
	"github.com/idemgate/idemgate/proxy"
)

// sweepInterval is how often the local limiters (and the Redis limiters'
// deny caches) drop the states that equal fresh ones.
const sweepInterval = time.Minute

// edgeLimiterName and routeLimiterPrefix name the limiters, in Redis keys
// (prefix + "rl:" + name + "{client}") and in limitSet's counters. A route's
// limiter is routeLimiterPrefix + the route's name, so that no route name can
// collide with the edge limiter's keys.
const (
	edgeLimiterName    = "edge"
	routeLimiterPrefix = "route:"
)

// limitSet is the running limiters, kept for the metrics: the ops work
// exports its counters (see the methods). Every method is safe for
// concurrent use.
type limitSet struct {
	local    map[string]*limiter.Limiter // by limiter name; nil entries never
	backend  *redislimiter.Backend       // nil with limiter.backend local
	rejected map[rejectLabel]*atomic.Uint64
}

// rejectLabel is a rejection counter's labels, as proxy.LimitOptions.OnReject
// reports them: limiter proxy.LimiterEdge and route "", or proxy.LimiterRoute
// and the route's name.
type rejectLabel struct{ limiter, route string }

// rejections returns how many requests each limiter refused, by limiter
// (proxy.LimiterEdge or proxy.LimiterRoute) and route name ("" for the edge).
// Every configured limiter has an entry, zero included.
func (s *limitSet) rejections() map[rejectLabel]uint64 {
	out := make(map[rejectLabel]uint64, len(s.rejected))
	for l, n := range s.rejected {
		out[l] = n.Load()
	}
	return out
}

// evictions returns, by limiter name, how many client states each local
// limiter dropped before they were fresh, to make room (limiter.max_clients
// reached). It is empty with the Redis backend, whose state Redis bounds.
func (s *limitSet) evictions() map[string]uint64 {
	out := make(map[string]uint64, len(s.local))
	for name, l := range s.local {
		out[name] = l.Evictions()
	}
	return out
}

// fallbacks returns how many requests passed unlimited because Redis could
// not decide (limiter.backend redis; always 0 otherwise).
func (s *limitSet) fallbacks() uint64 {
	if s.backend == nil {
		return 0
	}
	return s.backend.Fallbacks()
}

// onReject counts a rejection (proxy.LimitOptions.OnReject).
func (s *limitSet) onReject(l, route string) {
	if n := s.rejected[rejectLabel{l, route}]; n != nil {
		n.Add(1)
	}
}

// checkLimits refuses the limit settings this build cannot honour exactly.
func checkLimits(cfg *config.Config) []error {
	var errs []error
	if _, _, err := edgeRate(cfg.EdgeLimit.Rate); err != nil {
		errs = append(errs, fmt.Errorf("edge_limit.rate: %w", err))
	}
	if cfg.Limiter.Backend == config.LimiterRedis {
		// The Redis scripts count in microseconds.
		for i, r := range cfg.Routes {
			if r.RateLimit == nil {
				continue
			}
			for key, d := range map[string]time.Duration{"per": r.RateLimit.Per, "block": r.RateLimit.Block} {
				if d%time.Microsecond != 0 {
					errs = append(errs, fmt.Errorf("routes[%d].rate_limit.%s: %v is not a whole number of microseconds, which limiter.backend redis needs", i, key, d))
				}
			}
		}
	}
	return errs
}

// edgeRate turns edge_limit.rate into the limiter's whole requests per
// period: a whole rate per second, or else the rate in milli-requests per
// 1000 s (nginx's own precision), which is the same rate exactly.
func edgeRate(r float64) (int, time.Duration, error) {
	switch {
	case r == 0:
		return 0, time.Second, nil
	case r == math.Trunc(r) && r >= 1 && r <= 1e9:
		return int(r), time.Second, nil
	}
	milli := math.Round(r * 1000)
	if milli < 1 || milli > 1e12 || math.Abs(milli-r*1000) > 1e-6*milli {
		return 0, 0, fmt.Errorf("%v: want at most 1e9 requests per second, with at most three decimals, and at least 0.001", r)
	}
	return int(milli), 1000 * time.Second, nil
}

// buildLimits makes the edge limiter and one limiter per route with a
// rate_limit, per process or in Redis (limiter.backend), and puts their
// stages into opts.
func (a *app) buildLimits(opts *proxy.Options) error {
	cfg := a.cfg
	if err := errors.Join(checkLimits(cfg)...); err != nil {
		return err
	}
	rate, per, _ := edgeRate(cfg.EdgeLimit.Rate)
	edgeOpts := limiter.EdgeOptions{
		Rate:          rate,
		Per:           per,
		Burst:         cfg.EdgeLimit.Burst,
		MaxClients:    cfg.Limiter.MaxClients,
		SweepInterval: sweepInterval,
	}
	routeOpts := func(rl *config.RateLimit) limiter.RouteOptions {
		return limiter.RouteOptions{
			Algorithm:     limiter.Algorithm(rl.Algorithm),
			Requests:      rl.Requests,
			Per:           rl.Per,
			Block:         rl.Block,
			MaxClients:    cfg.Limiter.MaxClients,
			SweepInterval: sweepInterval,
		}
	}
	set := &limitSet{local: map[string]*limiter.Limiter{}, rejected: map[rejectLabel]*atomic.Uint64{}}
	var edge proxy.Limiter
	routes := map[string]proxy.Limiter{}

	switch cfg.Limiter.Backend {
	case config.LimiterRedis:
		rc := cfg.Store.Redis
		// A client of its own: a flood of limiter calls cannot starve the
		// store's claims of connections, and the other way round.
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
		b, err := redislimiter.New(client, redislimiter.Options{
			KeyPrefix: rc.KeyPrefix,
			Logger:    a.log.With("component", "limiter"),
		})
		if err != nil {
			client.Close()
			return fmt.Errorf("store.redis: %w", err)
		}
		set.backend = b
		var closers []func() error
		defer func() {
			// The limiters close before the client they use.
			a.closers = append(append(a.closers, closers...), client.Close)
		}()
		if edgeOpts.Rate > 0 {
			l, err := b.NewEdge(edgeLimiterName, edgeOpts)
			if err != nil {
				return fmt.Errorf("edge_limit: %w", err)
			}
			closers = append(closers, l.Close)
			edge = l
		}
		for i, r := range cfg.Routes {
			if r.RateLimit == nil {
				continue
			}
			l, err := b.NewRoute(routeLimiterPrefix+r.Name, routeOpts(r.RateLimit))
			if err != nil {
				return fmt.Errorf("routes[%d].rate_limit: %w", i, err)
			}
			closers = append(closers, l.Close)
			routes[r.Name] = l
		}
	default:
		if edgeOpts.Rate > 0 {
			l, err := limiter.NewEdge(edgeOpts)
			if err != nil {
				return fmt.Errorf("edge_limit: %w", err)
			}
			a.closers = append(a.closers, l.Close)
			set.local[edgeLimiterName] = l
			edge = l
		}
		for i, r := range cfg.Routes {
			if r.RateLimit == nil {
				continue
			}
			l, err := limiter.NewRoute(routeOpts(r.RateLimit))
			if err != nil {
				return fmt.Errorf("routes[%d].rate_limit: %w", i, err)
			}
			a.closers = append(a.closers, l.Close)
			set.local[routeLimiterPrefix+r.Name] = l
			routes[r.Name] = l
		}
	}

	if edge != nil {
		set.rejected[rejectLabel{proxy.LimiterEdge, ""}] = new(atomic.Uint64)
	}
	for name := range routes {
		set.rejected[rejectLabel{proxy.LimiterRoute, name}] = new(atomic.Uint64)
	}
	opts.Stages.Edge, opts.Stages.RouteLimits = edge, routes
	opts.Stages.IETFHeaders, opts.Stages.OnReject = cfg.Limiter.IETFHeaders, set.onReject
	a.limits = set
	return nil
}
