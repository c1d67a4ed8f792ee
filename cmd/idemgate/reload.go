package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/config"
)

// reloadState is the state of the configuration reload (DESIGN.md's routes,
// limits and session settings, replaced without a restart).
type reloadState struct {
	mu             sync.Mutex     // protects the fields below; one reload at a time
	live           *config.Config // what runs: the file's reloadable keys, the start's others
	started        bool           // the watcher delivered its first read
	limitClosers   []func() error // the limiters built by the last reload that rebuilt them
	sessionClosers []func() error // the same for the session queue
	closed         bool

	// Watch timing; zero takes config.Watch's defaults (tests shorten them).
	debounce, poll time.Duration
}

// restartOnly reports whether a changed config key (as config.ChangedKeys
// names it) needs a restart: the listeners, TLS, the store, the upstream,
// the client address rule, the idempotency settings (they decide record
// keys) and the limiters' backend. Routes, mode, edge_limit, the other
// limiter keys and sessions are reloaded.
func restartOnly(key string) bool {
	switch {
	case key == "routes", key == "mode",
		strings.HasPrefix(key, "edge_limit."),
		strings.HasPrefix(key, "sessions."),
		strings.HasPrefix(key, "limiter.") && key != "limiter.backend":
		return false
	}
	return true
}

// startReload runs the reload loop in g until ctx ends: config.Watch on the
// config file (events, a periodic poll) and SIGHUP, which forces a read.
func (a *app) startReload(ctx context.Context, g *errgroup.Group) {
	if a.configPath == "" || a.rl == nil {
		return
	}
	kick := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	g.Go(func() error {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				a.log.Info("SIGHUP: reading the config file", "component", "reload", "file", a.configPath)
				select {
				case kick <- struct{}{}:
				default: // a read is already due
				}
			}
		}
	})
	g.Go(func() error {
		return config.Watch(ctx, a.configPath, config.WatchOptions{
			Debounce: a.rl.debounce,
			Poll:     a.rl.poll,
			Reload:   kick,
			Logger:   a.log.With("component", "reload", "file", a.configPath),
		}, a.applyConfig)
	})
}

// parseConfig decodes, validates and checks a config file's content, as
// loadConfig does for the file at start.
func parseConfig(data []byte) (*config.Config, error) {
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, checkConfig(cfg)
}

// applyConfig is the reload: it parses the file's new content and, if it is
// valid, replaces the proxy's routing (routes, modes, limit stages, session
// stage) atomically; requests already running finish on the old one. An
// invalid file is refused with one log line and
// idemgate_config_reloads_total{result="failure"}: the running config keeps
// serving. Changes to keys that need a restart are logged (and
// idemgate_config_restart_required set) and ignored until the restart.
func (a *app) applyConfig(data []byte, readErr error) {
	rl := a.rl
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.closed {
		return
	}
	if rl.live == nil {
		rl.live = a.cfg
	}
	first := !rl.started
	rl.started = true
	log := a.log.With("component", "reload", "file", a.configPath)
	refuse := func(msg string, err error) {
		log.Error(msg+"; the running config keeps serving", "problems", problemLines(err))
		a.metrics.ObserveConfigReload(false, false)
	}
	if readErr != nil {
		refuse("config reload refused: the file cannot be read", readErr)
		return
	}
	next, err := parseConfig(data)
	if err != nil {
		refuse("config reload refused: invalid config", err)
		return
	}
	var restart []string
	for _, k := range config.ChangedKeys(a.cfg, next) {
		if restartOnly(k) {
			restart = append(restart, k)
		}
	}
	applied := withRestartKeys(next, a.cfg, restart)
	changed := config.ChangedKeys(rl.live, applied)
	switch {
	case len(changed) > 0:
		if err := a.applyRouting(applied); err != nil {
			refuse("config reload refused", err)
			return
		}
		rl.live = applied
		log.Info("config reloaded", "changed", changed, "routes", len(applied.Routes))
	case first && len(restart) == 0:
		return // the watcher's first read: what the app started with
	default:
		log.Info("config file read; nothing to apply")
	}
	if len(restart) > 0 {
		log.Warn("config changes need a restart; they are ignored until then", "keys", restart)
	}
	a.metrics.ObserveConfigReload(true, len(restart) > 0)
}

// applyRouting builds the routing of applied and swaps it in. Limit and
// session stages are rebuilt only when their settings changed, so that a
// change of routes alone keeps every client's counts and every session's
// line.
func (a *app) applyRouting(applied *config.Config) error {
	rl := a.rl
	opts, err := a.proxyOptions(applied, nil)
	if err != nil {
		return err
	}
	cur := a.proxy.Stages()
	rt := cur
	rt.Routes = opts.Stages.Routes

	// Stages are built by the same code as at the start, on a copy of the
	// app that carries the applied config; what they open is theirs to
	// close.
	var limitClosers, sessionClosers []func() error
	var limits *limitSet
	newLimits, newSessions := false, false
	undo := func() {
		closeEach(limitClosers)
		closeEach(sessionClosers)
	}
	if limitsChanged(rl.live, applied) {
		sh := a.shadow(applied)
		o := opts
		if err := sh.buildLimits(&o); err != nil {
			closeEach(sh.closers)
			return err
		}
		rt.Edge, rt.RouteLimits, rt.IETFHeaders, rt.OnReject = o.Stages.Edge, o.Stages.RouteLimits, o.Stages.IETFHeaders, o.Stages.OnReject
		limitClosers, limits, newLimits = sh.closers, sh.limits, true
	}
	if sessionsChanged(rl.live, applied, cur.Sessions != nil) {
		sh := a.shadow(applied)
		o := opts
		if err := sh.buildSessions(&o); err != nil {
			closeEach(sh.closers)
			undo()
			return err
		}
		rt.Sessions = o.Stages.Sessions
		sessionClosers, newSessions = sh.closers, true
	}
	if err := a.proxy.Reload(rt); err != nil {
		undo()
		return err
	}
	// The old stages only serve requests that were already running; a
	// limiter answers after Close.
	if newLimits {
		closeEach(rl.limitClosers)
		rl.limitClosers = limitClosers
		a.limitsMetric.Store(limits)
	}
	if newSessions {
		closeEach(rl.sessionClosers)
		rl.sessionClosers = sessionClosers
	}
	return nil
}

// shadow returns a copy of the app for building stages from cfg: the
// build functions (buildLimits, buildSessions) read the app's config and
// collect what they open in its closers.
func (a *app) shadow(cfg *config.Config) *app {
	return &app{cfg: cfg, log: a.log, store: a.store, pingable: a.pingable, opsState: a.opsState}
}

// closeStages closes what reloads built; app.closeAll runs it after the
// servers stopped.
func (a *app) closeStages() error {
	rl := a.rl
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.closed = true
	closeEach(rl.limitClosers)
	closeEach(rl.sessionClosers)
	rl.limitClosers, rl.sessionClosers = nil, nil
	return nil
}

func closeEach(cs []func() error) {
	for _, c := range cs {
		c()
	}
}

// limitsChanged reports whether the limit stages must be rebuilt: the edge
// limit, the limiter settings, or any route's rate_limit (or the set of
// limited routes) changed.
func limitsChanged(old, next *config.Config) bool {
	if !reflect.DeepEqual(old.EdgeLimit, next.EdgeLimit) || !reflect.DeepEqual(old.Limiter, next.Limiter) {
		return true
	}
	return !reflect.DeepEqual(rateLimits(old), rateLimits(next))
}

func rateLimits(c *config.Config) map[string]config.RateLimit {
	m := map[string]config.RateLimit{}
	for _, r := range c.Routes {
		if r.RateLimit != nil {
			m[r.Name] = *r.RateLimit
		}
	}
	return m
}

// sessionsChanged reports whether the session stage must be rebuilt: its
// settings changed, or a route now takes turns and there is no stage yet.
// (Session routes that change keep the running stage: it reads each
// request's route.)
func sessionsChanged(old, next *config.Config, haveStage bool) bool {
	if !reflect.DeepEqual(old.Sessions, next.Sessions) {
		return true
	}
	if haveStage {
		return false
	}
	for _, r := range next.Routes {
		if r.Session != nil {
			return true
		}
	}
	return false
}

// withRestartKeys returns a copy of next with the values of the keys in
// keys (as config.ChangedKeys names them) taken from start.
func withRestartKeys(next, start *config.Config, keys []string) *config.Config {
	c := *next
	dst, src := reflect.ValueOf(&c).Elem(), reflect.ValueOf(start).Elem()
	for _, k := range keys {
		d, s := dst, src
		for part := range strings.SplitSeq(k, ".") {
			d, s = fieldByTag(d, part), fieldByTag(s, part)
		}
		if d.IsValid() && s.IsValid() {
			d.Set(s)
		}
	}
	return &c
}

// fieldByTag returns v's field whose mapstructure name is name.
func fieldByTag(v reflect.Value, name string) reflect.Value {
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	t := v.Type()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ","); tag == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}

// problemLines splits joined errors into one string each, for one log line.
func problemLines(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		for l := range strings.SplitSeq(e.Error(), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	if err != nil {
		walk(err)
	}
	if len(out) == 0 {
		out = []string{fmt.Sprint(err)}
	}
	return out
}
