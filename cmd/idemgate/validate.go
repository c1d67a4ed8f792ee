package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemgate/idemgate/config"
)

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML)")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *path == "" {
		fmt.Fprintln(stderr, "idemgate validate: --config FILE is required")
		return errUsage
	}
	cfg, err := loadConfig(*path)
	if cfg == nil && err != nil && !errors.Is(err, config.ErrSyntax) {
		return err // the file could not be read: one line
	}
	warnings := config.UnknownEnv(os.Environ(), cfg)
	if err == nil {
		warnings = append(warnings, cfg.Warnings()...)
	}
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		lines := strings.Split(err.Error(), "\n")
		for _, line := range lines {
			fmt.Fprintln(stderr, line)
		}
		if len(lines) == 1 {
			return fmt.Errorf("%s: invalid config (1 problem)", *path)
		}
		return fmt.Errorf("%s: invalid config (%d problems)", *path, len(lines))
	}
	fmt.Fprintf(stdout, "%s: valid; upstream %s, store %s, %d routes\n", *path, cfg.Upstream.URL, cfg.Store.Backend, len(cfg.Routes))
	for _, r := range cfg.Routes {
		var flags []string
		if r.Idempotent {
			flags = append(flags, "idempotent")
		}
		if r.RequireKey {
			flags = append(flags, "require_key")
		}
		if r.Session != nil {
			if r.Session.Param != "" {
				flags = append(flags, "session={"+r.Session.Param+"}")
			} else {
				flags = append(flags, "session=header:"+r.Session.Header)
			}
		}
		if r.RateLimit != nil {
			flags = append(flags, fmt.Sprintf("rate_limit=%d/%s(%s)", r.RateLimit.Requests, r.RateLimit.Per, r.RateLimit.Algorithm))
		}
		if r.Protocol != "" {
			flags = append(flags, "protocol="+r.Protocol)
		}
		if r.EffectiveMode(cfg.Mode) == config.ModeObserve {
			flags = append(flags, "observe")
		}
		fmt.Fprintf(stdout, "  %-24s %-7s %-40s %s\n", r.Name, r.Method, r.Path, strings.Join(flags, " "))
	}
	return nil
}

// loadConfig loads and validates (every problem at once, see
// [config.LoadChecked]) and checks that every feature the config asks for
// is one this build has.
// On error, cfg is what could be decoded (or nil), for reports only.
func loadConfig(path string) (*config.Config, error) {
	cfg, err := config.LoadChecked(path)
	if err != nil {
		return cfg, err
	}
	return cfg, checkConfig(cfg)
}
