package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// errNoAdminStore disables the admin API of a store without admin
// operations.
var errNoAdminStore = errors.New("the store has no admin operations")

// healthz answers whether the process is alive, with the store's health
// (informational: the answer is 200 whatever the store says).
func (a *App) healthz(w http.ResponseWriter, r *http.Request) {
	store := map[string]any{"backend": a.cfg.Store.Backend, "status": "ok"}
	if a.ping != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := a.ping.Ping(ctx); err != nil {
			store["status"] = "unavailable"
			store["error"] = firstLine(err)
		}
	}
	if a.epoch != nil {
		store["resets"] = resetsOf(a.epoch.EpochStatus())
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": a.o.Version, "store": store})
}

// resets is /healthz's report of store resets (DESIGN.md, Store loss).
type resets struct {
	// Count is how often the store was found emptied since the start.
	Count uint64 `json:"count"`
	// Last is when it last was; absent if never.
	Last *time.Time `json:"last,omitempty"`
	// Checked is when the epoch marker was last read; absent if never
	// (the memory store cannot lose records).
	Checked *time.Time `json:"checked,omitempty"`
	// Error is the last check's error, if it failed.
	Error string `json:"error,omitempty"`
}

func resetsOf(st keystore.EpochStatus) resets {
	r := resets{Count: st.Resets}
	if !st.LastReset.IsZero() {
		t := st.LastReset.UTC()
		r.Last = &t
	}
	if !st.Checked.IsZero() {
		t := st.Checked.UTC()
		r.Checked = &t
	}
	if st.Err != nil {
		r.Error = firstLine(st.Err)
	}
	return r
}

func firstLine(err error) string { return strings.SplitN(err.Error(), "\n", 2)[0] }

// readyz answers whether the app takes traffic: started and not draining.
// Deliberately not the store's health (DESIGN.md, Admin listener).
func (a *App) readyz(w http.ResponseWriter, r *http.Request) {
	switch {
	case a.draining.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
	case !a.ready.Load():
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
