package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/cliflags"
	"github.com/idemgate/idemgate/internal/openapi"
)

func runValidate(args []string, stdout, stderr io.Writer) error {
	fs := cliflags.New("validate", `usage:
  idemgate validate --config FILE             check a config; print the routes it understood
  idemgate validate --against SPEC CONFIG     report writes of an OpenAPI document no route protects
  idemgate validate --diff OLD NEW            what a reload from config OLD to NEW does
`)
	path := fs.String("config", "", "config file (YAML)")
	against := fs.String("against", "", "OpenAPI/Swagger document: report unprotected writes and routes matching no operation")
	diff := fs.Bool("diff", false, "validate --diff OLD NEW: what changing the running config OLD to NEW does on a reload")
	if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
		return flagErr(err)
	}
	if *diff {
		if fs.NArg() != 2 || *path != "" || *against != "" {
			fmt.Fprintln(stderr, "idemgate validate --diff OLD NEW: two config files")
			return errUsage
		}
		return runDiff(fs.Arg(0), fs.Arg(1), stdout, stderr)
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
		if n := printProblems(stderr, err); n != 1 {
			return fmt.Errorf("%s: invalid config (%d problems)", *path, n)
		}
		return fmt.Errorf("%s: invalid config (1 problem)", *path)
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
	// The profile's choices, once: what it set that the file and the
	// environment left to it.
	if cfg.Profile != config.ProfileDefault {
		data, _ := os.ReadFile(*path) // read once already
		src, serr := cfg.Sources(data, os.Environ())
		if serr != nil {
			src = nil
		}
		fmt.Fprintf(stdout, "profile %s sets:\n", cfg.Profile)
		for _, line := range cfg.ProfileChoices(src) {
			fmt.Fprintln(stdout, "  "+line)
		}
	}
	// A config that leaves the identity to the default, or does not
	// require one, gets what that means spelled out
	// (docs/config.md#choosing-the-identity).
	if !cfg.Idempotency.IdentityChosen() {
		for _, line := range cfg.Idempotency.ExplainIdentity() {
			fmt.Fprintln(stdout, line)
		}
	}
	return nil
}

// runDiff prints what a reload from the config at oldPath to the one at
// newPath does (config.Compare, the reload's own rule): the keys it
// applies, those that wait for a restart, and what the change does to
// retries of earlier writes. It fails when either file is invalid or a
// reload would refuse the new one.
func runDiff(oldPath, newPath string, stdout, stderr io.Writer) error {
	load := func(path string) (*config.Config, error) {
		cfg, err := loadConfig(path)
		if err != nil {
			if cfg != nil || errors.Is(err, config.ErrSyntax) {
				printProblems(stderr, err)
				return nil, fmt.Errorf("%s: invalid config", path)
			}
			return nil, err
		}
		return cfg, nil
	}
	old, err := load(oldPath)
	if err != nil {
		return err
	}
	next, err := load(newPath)
	if err != nil {
		return err
	}
	d := config.Compare(old, next)
	if len(d.Live) == 0 && len(d.Restart) == 0 {
		fmt.Fprintf(stdout, "%s -> %s: no change\n", oldPath, newPath)
		return nil
	}
	fmt.Fprintf(stdout, "%s -> %s\n", oldPath, newPath)
	if len(d.Live) > 0 {
		fmt.Fprintf(stdout, "applied on reload: %s\n", strings.Join(d.Live, ", "))
	}
	if len(d.Restart) > 0 {
		fmt.Fprintf(stdout, "need a restart: %s\n", strings.Join(d.Restart, ", "))
	}
	for _, e := range d.Effects {
		fmt.Fprintln(stdout, "warning:", e)
	}
	if d.Refused != nil {
		printProblems(stderr, d.Refused)
		return fmt.Errorf("%s: a reload would refuse it: valid on its own, but not with the running values of %s; restart to apply it",
			newPath, strings.Join(d.Restart, ", "))
	}
	return nil
}

// printProblems writes err's problems to w, one a line, and returns how
// many there were.
func printProblems(w io.Writer, err error) int {
	lines := strings.Split(err.Error(), "\n")
	for _, line := range lines {
		fmt.Fprintln(w, line)
	}
	return len(lines)
}
