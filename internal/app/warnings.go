package app

import (
	"log/slog"
	"os"

	"github.com/idemgate/idemgate/config"
)

// logConfigWarnings logs what does not stop idemgate but is likely a
// mistake: IDEMGATE_* variables that nothing reads (a misspelt key) and
// the config's own warnings (config.Config.Warnings), one line each.
func logConfigWarnings(cfg *config.Config, log *slog.Logger) {
	for _, w := range config.UnknownEnv(os.Environ(), cfg) {
		log.Warn("unknown environment variable", "name", w.Name, "problem", w.Msg)
	}
	for _, w := range cfg.Warnings() {
		log.Warn("config warning", "key", w.Name, "problem", w.Msg)
	}
}
