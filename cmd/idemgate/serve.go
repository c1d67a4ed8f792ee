package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/cliflags"
	"github.com/idemgate/idemgate/internal/jsonlog"
	"github.com/idemgate/idemgate/internal/memlimit"
)

// defaultGrace is how long in-flight requests may run on after SIGTERM.
const defaultGrace = 30 * time.Second

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cliflags.New("idemgate", "usage: idemgate --config FILE [--grace 30s] [--log-level info] [--log-flush 100ms]\n  Runs the proxy.\n")
	path := fs.String("config", "", "config file (YAML)")
	grace := fs.Duration("grace", defaultGrace, "how long in-flight requests may run on after SIGTERM")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	flushEvery := fs.Duration("log-flush", 100*time.Millisecond, "write log lines in batches at least this often; 0 writes each line at once")
	if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
		return flagErr(err)
	}
	if *path == "" {
		fmt.Fprint(stderr, "idemgate: --config FILE is required\n"+usage)
		return errUsage
	}
	logOut := stderr
	if *flushEvery > 0 {
		lb := app.NewLogBuffer(stderr, 64<<10, *flushEvery)
		defer lb.Close()
		logOut = lb
	}
	log, err := newLogger(logOut, *level)
	if err != nil {
		return err
	}
	// GOMEMLIMIT: 90 % of the container's memory limit when unset
	// (DESIGN.md, Bounds); logged either way. Then no collection before
	// the heap reaches 64 MiB (a quarter of that limit at most) when GOGC
	// is unset: the collector took 9 % of a pass-through's CPU (issue 31).
	limit, _ := memlimit.Set(log)
	memlimit.KeepHeapFloor(log, memlimit.DefaultHeapFloor, limit)
	app.SetRedisLogger(log)
	cfg, err := loadConfig(*path)
	if err != nil {
		// As JSON lines, one per problem, among the other log lines.
		app.LogInvalidConfig(log, *path, cfg, err)
		return errReported
	}
	a, err := app.New(cfg, app.Options{
		Logger:     log,
		Version:    version,
		Revision:   buildRevision(),
		ConfigPath: *path, // reloaded on change and on SIGHUP
		AdminToken: os.Getenv(app.AdminTokenEnv),
	})
	if err != nil {
		return err
	}
	return a.Serve(ctx, *grace, nil)
}

// newLogger writes slog's JSON lines with the time in UTC, through
// internal/jsonlog: the same bytes as slog.NewJSONHandler's behind a
// handler that set the record's time to UTC, at a fraction of its CPU per
// access-log line (issue 31; BENCHMARKS.md).
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var lv slog.LevelVar
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(jsonlog.New(w, &slog.HandlerOptions{Level: &lv})), nil
}

// loadConfig loads and validates the config file at path.
func loadConfig(path string) (*config.Config, error) {
	return config.LoadChecked(path)
}
