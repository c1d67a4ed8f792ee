package app

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/idemgate/idemgate/admin"
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

// limitSet is the running limiters, kept for the metrics (limitsCollector).
// Every method is safe for concurrent use.
type limitSet struct {
	edge    proxy.Limiter                // nil: no edge limit
	routes  map[string]proxy.Limiter     // by route name
	local   map[string]*limiter.Limiter  // by limiter name; nil entries never
	backend *redislimiter.Backend        // nil with limiter.backend local
	top     map[limitLabel]*limiter.TopK // each limiter's busiest clients
}

// limitLabel names a limiter: proxy.LimiterEdge and route "", or
// proxy.LimiterRoute and the route's name.
type limitLabel struct{ limiter, route string }

// newLimiters makes the edge limiter and one limiter per route with a
// rate_limit, per process or in Redis (limiter.backend), and pushes their
// closers onto cs: the limiters close before their Redis client.
func newLimiters(cfg *config.Config, rt *redisstore.Timeout, log *slog.Logger, cs *closeStack) (*limitSet, error) {
	rate, per, err := cfg.EdgeLimit.PerPeriod()
	if err != nil {
		return nil, fmt.Errorf("edge_limit.rate: %w", err)
	}
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
	set := &limitSet{routes: map[string]proxy.Limiter{}, local: map[string]*limiter.Limiter{}, top: map[limitLabel]*limiter.TopK{}}
	// The two backends make limiters the same way.
	newEdge := func(o limiter.EdgeOptions) (proxy.Limiter, func() error, error) {
		l, err := limiter.NewEdge(o)
		if err != nil {
			return nil, nil, err
		}
		set.local[edgeLimiterName] = l
		return l, l.Close, nil
	}
	newRoute := func(name string, o limiter.RouteOptions) (proxy.Limiter, func() error, error) {
		l, err := limiter.NewRoute(o)
		if err != nil {
			return nil, nil, err
		}
		set.local[routeLimiterPrefix+name] = l
		return l, l.Close, nil
	}
	if cfg.Limiter.Backend == config.LimiterRedis {
		client, err := newRedisClient(cfg.Store.Redis, rt, cs)
		if err != nil {
			return nil, err
		}
		b, err := redislimiter.New(client, redislimiter.Options{
			KeyPrefix: cfg.Store.Redis.KeyPrefix,
			Logger:    log.With("component", "limiter"),
		})
		if err != nil {
			return nil, fmt.Errorf("store.redis: %w", err)
		}
		set.backend = b
		newEdge = func(o limiter.EdgeOptions) (proxy.Limiter, func() error, error) {
			l, err := b.NewEdge(edgeLimiterName, o)
			if err != nil {
				return nil, nil, err
			}
			return l, l.Close, nil
		}
		newRoute = func(name string, o limiter.RouteOptions) (proxy.Limiter, func() error, error) {
			l, err := b.NewRoute(routeLimiterPrefix+name, o)
			if err != nil {
				return nil, nil, err
			}
			return l, l.Close, nil
		}
	}
	if edgeOpts.Rate > 0 {
		l, closeL, err := newEdge(edgeOpts)
		if err != nil {
			return nil, fmt.Errorf("edge_limit: %w", err)
		}
		cs.push(closeL)
		label := limitLabel{proxy.LimiterEdge, ""}
		set.edge = set.counted(label, l)
	}
	for i, r := range cfg.Routes {
		if r.RateLimit == nil {
			continue
		}
		l, closeL, err := newRoute(r.Name, routeOpts(r.RateLimit))
		if err != nil {
			return nil, fmt.Errorf("routes[%d].rate_limit: %w", i, err)
		}
		cs.push(closeL)
		label := limitLabel{proxy.LimiterRoute, r.Name}
		set.routes[r.Name] = set.counted(label, l)
	}
	return set, nil
}

// counted returns l with its decisions counted in a new TopK of label's.
func (s *limitSet) counted(label limitLabel, l proxy.Limiter) proxy.Limiter {
	top := limiter.NewTopK()
	s.top[label] = top
	return countedLimiter{Limiter: l, top: top}
}

// countedLimiter counts each decision of its Limiter, by client, in top:
// the busiest clients of the console and GET /admin/limits/clients. Passed
// requests are sampled (limiter.TopK.Record), so the cost a request that
// passes adds is one random number nearly always.
type countedLimiter struct {
	proxy.Limiter
	top *limiter.TopK
}

// AllowContext implements proxy.Limiter.
func (c countedLimiter) AllowContext(ctx context.Context, k limiter.Key, now time.Time) limiter.Decision {
	d := c.Limiter.AllowContext(ctx, k, now)
	c.top.Record(k, !d.OK)
	return d
}

// busiestClients is how many clients per limiter the console and the admin
// API show.
const busiestClients = 20

// busiest returns each limiter's busiest clients (at most busiestClients),
// the edge limiter first, then the routes by name.
func (s *limitSet) busiest() []admin.LimiterClients {
	out := make([]admin.LimiterClients, 0, len(s.top))
	for label, top := range s.top {
		lc := admin.LimiterClients{Limiter: label.limiter, Route: label.route, Clients: []admin.Client{}}
		for _, c := range top.Top(busiestClients) {
			lc.Clients = append(lc.Clients, admin.Client{Client: c.Key.String(), Requests: c.Requests, MaxOvercount: c.Err, Refused: c.Refused})
		}
		out = append(out, lc)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Limiter != out[j].Limiter {
			return out[i].Limiter == proxy.LimiterEdge
		}
		return out[i].Route < out[j].Route
	})
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
