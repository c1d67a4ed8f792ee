package main

import (
	"fmt"
	"io"
	"os"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/cliflags"
)

// runConfig prints the effective config: the defaults, then the profile's
// presets, then the file (if any), then the IDEMGATE_* environment, as YAML
// with secrets redacted and each value's source (default, profile, file,
// env) in a comment.
// Warnings and problems go to stderr; an invalid config is still printed
// as far as it decodes, and exits 1.
func runConfig(args []string, stdout, stderr io.Writer) error {
	fs := cliflags.New("config", "usage: idemgate config [--config FILE]\n  Prints the effective config (defaults + file + IDEMGATE_* environment), secrets redacted.\n")
	path := fs.String("config", "", "config file (YAML); without it, the defaults and the environment")
	if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
		return flagErr(err)
	}
	var data []byte
	if *path != "" {
		var err error
		if data, err = os.ReadFile(*path); err != nil {
			return err
		}
	}
	cfg, err := config.Check(data)
	if cfg == nil {
		return err // a syntax error: nothing decoded
	}
	for _, w := range config.UnknownEnv(os.Environ(), cfg) {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err == nil {
		for _, w := range cfg.Warnings() {
			fmt.Fprintln(stderr, "warning:", w)
		}
	}
	src, serr := cfg.Sources(data, os.Environ())
	if serr != nil {
		return serr
	}
	out, yerr := cfg.EffectiveYAMLSources(src)
	if yerr != nil {
		return yerr
	}
	stdout.Write(out)
	token := "not set: the admin API is disabled"
	if os.Getenv(app.AdminTokenEnv) != "" {
		token = "set (" + config.Redacted + ")"
	}
	fmt.Fprintf(stdout, "# %s: %s\n", app.AdminTokenEnv, token)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return fmt.Errorf("invalid config")
	}
	return nil
}
