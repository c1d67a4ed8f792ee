package app

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/idemgate/idemgate/admin/console"
	"github.com/idemgate/idemgate/session"
)

// newConsole builds the operator console (/ui/) on the admin API api, with
// token ("" disables it) and the app's live state as its sources.
func (a *App) newConsole(api http.Handler, token, adminHost string, log *slog.Logger) (*console.Handler, error) {
	o := console.Options{Token: token, Admin: api, Logger: log, Hosts: hostList(adminHost)}
	o.Routes = a.consoleRoutes
	o.Health = a.consoleHealth
	o.Config = a.configStatus
	o.Sessions = a.consoleSessions
	o.Limits = a.consoleLimits
	return console.New(o)
}

// hostList is admin_host as the console's Hosts.
func hostList(adminHost string) []string {
	if adminHost == "" {
		return nil
	}
	return []string{adminHost}
}

// counters reads the app's counters of family name, by their labels.
func (a *App) counters(name string) []*dto.Metric {
	mfs, err := a.reg.Gather()
	if err != nil && mfs == nil {
		return nil
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return 0
}

// consoleRoutes is the running routes with the request counters the proxy
// keeps (idemgate_http_requests_total), and requests no route matched.
func (a *App) consoleRoutes() []console.Route {
	byName := map[string]*console.Route{}
	var out []console.Route
	for _, r := range a.proxy.Policy().Routes {
		out = append(out, console.Route{Name: r.Name, Method: r.Method, Path: r.Path, Idempotent: r.Idempotent, Requests: map[string]float64{}})
	}
	out = append(out, console.Route{Requests: map[string]float64{}}) // no route matched
	for i := range out {
		byName[out[i].Name] = &out[i]
	}
	for _, m := range a.counters("idemgate_http_requests_total") {
		r, ok := byName[labelOf(m, "route")]
		if !ok {
			continue // a route a reload removed
		}
		v := valueOf(m)
		r.Requests[labelOf(m, "outcome")] += v
		r.Total += v
	}
	return out
}

// consoleHealth is /healthz's store report.
func (a *App) consoleHealth(ctx context.Context) console.Health {
	h := console.Health{Backend: a.cfg.Store.Backend, OK: true}
	if a.ping != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if err := a.ping.Ping(ctx); err != nil {
			h.OK, h.Error = false, firstLine(err)
		}
	}
	if a.epoch != nil {
		st := a.epoch.EpochStatus()
		h.Resets, h.LastReset, h.Checked = st.Resets, st.LastReset, st.Checked
		if st.Err != nil {
			h.EpochError = firstLine(st.Err)
		}
	}
	return h
}

// heldSessions is how many of the longest-held session turns the console
// shows.
const heldSessions = 10

// consoleSessions is the session queue's state.
func (a *App) consoleSessions() console.Sessions {
	q := a.proxy.Policy().Sessions
	if q == nil {
		return console.Sessions{}
	}
	s := console.Sessions{Enabled: true, Active: q.Sessions(), StuckAfter: cmp.Or(a.liveConfig().Sessions.QueueTimeout, session.DefaultQueueTimeout)}
	for _, h := range q.Oldest(heldSessions) {
		s.Oldest = append(s.Oldest, console.HeldSession{Key: h.Key.String(), Since: h.Since, Waiting: h.Waiting, Locking: h.Locking})
	}
	for _, m := range a.counters("idemgate_session_queue_depth") {
		s.Waiting += valueOf(m)
	}
	for _, m := range a.counters("idemgate_session_rejections_total") {
		s.Rejected += valueOf(m)
	}
	return s
}

// consoleLimits is the limiters' rejections by route (those above 0).
func (a *App) consoleLimits() []console.Limit {
	var out []console.Limit
	for _, m := range a.counters("idemgate_limiter_rejections_total") {
		if v := valueOf(m); v > 0 {
			out = append(out, console.Limit{Limiter: labelOf(m, "limiter"), Route: labelOf(m, "route"), Rejected: v})
		}
	}
	return out
}

// configStatus is the loaded config's revision and the last reload's
// result, as the reload recorded them.
func (a *App) configStatus() console.ConfigStatus {
	if st := a.cfgStatus.Load(); st != nil {
		return *st
	}
	return console.ConfigStatus{}
}

// recordReload records a reload's result for the console: applied (a new
// revision of data), unchanged, or refused with its problems.
func (a *App) recordReload(result string, data []byte, problems, restart []string) {
	now := time.Now().UTC()
	prev := a.configStatus()
	st := prev
	st.LastReload, st.LastResult, st.LastProblems, st.RestartRequired = now, result, problems, restart
	switch {
	case result == "applied":
		sum := sha256.Sum256(data)
		st.Revision, st.Digest, st.Applied = prev.Revision+1, hex.EncodeToString(sum[:6]), now
	case result == "" && prev.Digest == "":
		// The watcher's first read: what the app started with.
		sum := sha256.Sum256(data)
		st = prev
		st.Digest = hex.EncodeToString(sum[:6])
	}
	a.cfgStatus.Store(&st)
}
