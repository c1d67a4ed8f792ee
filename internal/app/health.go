package app

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"
)

// errNoAdminStore disables the admin API of a store without admin
// operations.
var errNoAdminStore = errors.New("the store has no admin operations")

// healthz answers whether the process is alive, with the store's health
// (informational: the answer is 200 whatever the store says).
func (a *App) healthz(w http.ResponseWriter, r *http.Request) {
	store := map[string]string{"backend": a.cfg.Store.Backend, "status": "ok"}
	if a.ping != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := a.ping.Ping(ctx); err != nil {
			store["status"] = "unavailable"
			store["error"] = strings.SplitN(err.Error(), "\n", 2)[0]
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": a.o.Version, "store": store})
}

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
