package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/openapi"
)

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML)")
	against := fs.String("against", "", "OpenAPI/Swagger document: report unprotected writes and routes matching no operation")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *path == "" && fs.NArg() == 1 {
		*path = fs.Arg(0) // validate --against SPEC CONFIG
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
	if *against != "" {
		return openapi.RunAgainst(*against, *path, cfg, stdout, stderr)
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
			by := ""
			if r.RateLimit.By != "" && r.RateLimit.By != "client_ip" {
				by = ",by=" + r.RateLimit.By
			}
			flags = append(flags, fmt.Sprintf("rate_limit=%d/%s(%s%s)", r.RateLimit.Requests, r.RateLimit.Per, r.RateLimit.Algorithm, by))
		}
		if r.Protocol != "" {
			flags = append(flags, "protocol="+r.Protocol)
		}
		if r.EffectiveMode(cfg.Mode) == config.ModeObserve {
			flags = append(flags, "observe")
		}
		fmt.Fprintf(stdout, "  %-24s %-7s %-40s %s\n", r.Name, r.Method, r.Path, strings.Join(flags, " "))
	}
	// A config that leaves the identity to the default, or does not
	// require one, gets what that means spelled out (README, "Choosing
	// the identity").
	if !cfg.Idempotency.IdentityChosen() {
		for _, line := range cfg.Idempotency.ExplainIdentity() {
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}
