package app

import (
	"errors"
	"log/slog"
	"os"

	"github.com/idemgate/idemgate/config"
)

// logConfigWarnings logs what does not stop idemgate but is likely a
// mistake: IDEMGATE_* variables that nothing reads (a misspelt key) and
// the config's own warnings (config.Config.Warnings), one line each.
func logConfigWarnings(cfg *config.Config, log *slog.Logger) {
	logUnknownEnv(cfg, log)
	for _, w := range cfg.Warnings() {
		log.Warn("config warning", "key", w.Name, "problem", w.Msg)
	}
}

// logUnknownEnv logs each IDEMGATE_* variable that nothing reads, with the
// variable it most likely misspells (config.UnknownEnv); cfg may be nil.
func logUnknownEnv(cfg *config.Config, log *slog.Logger) {
	for _, w := range config.UnknownEnv(os.Environ(), cfg) {
		log.Warn("unknown environment variable", "name", w.Name, "problem", w.Msg)
	}
}

// LogInvalidConfig logs why the config file at path cannot start idemgate,
// as JSON lines among the others: first the IDEMGATE_* variables that
// nothing reads (a misspelt variable is often the cause), then one error
// line per problem of err (as config.Check returns it; cfg is what Check
// decoded, or nil), naming its key, or its line for a YAML syntax error.
// It returns the number of problems.
func LogInvalidConfig(log *slog.Logger, path string, cfg *config.Config, err error) int {
	log = log.With("component", "config", "file", path)
	logUnknownEnv(cfg, log)
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for _, e := range errs {
		var fe *config.FieldError
		var se *config.SyntaxError
		switch {
		case errors.As(e, &fe):
			log.Error("invalid config", "key", fe.Key, "problem", fe.Msg)
		case errors.As(e, &se) && se.Line > 0:
			log.Error("invalid config", "line", se.Line, "problem", se.Msg, "text", se.Text)
		default:
			log.Error("invalid config", "problem", e.Error())
		}
	}
	return len(errs)
}
