// Command idemgate is the idempotency reverse proxy. It is configured by one
// YAML file of routes (see README.md).
//
//	idemgate --config FILE            run the proxy
//	idemgate demo [--listen ADDR]     run the proxy in front of a built-in demo API
//	idemgate validate --config FILE   check a config and print the routes it has
//	idemgate validate --diff OLD NEW  what a reload from OLD to NEW does
//	idemgate version                  print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/idemgate/idemgate/internal/cliflags"
	"github.com/idemgate/idemgate/internal/openapi"
)

// version and revision are stamped at build time: -ldflags "-X
// main.version=v1.2.3 -X main.revision=<commit>" (the Makefile and the
// Dockerfile do). Without a stamped revision, the Go toolchain's VCS stamp
// is used when there is one.
var (
	version  = "dev"
	revision = ""
)

// buildRevision is the build's VCS revision, "" when unknown.
func buildRevision() string {
	if revision != "" {
		return revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) && !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "idemgate:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

// errReported is returned by a subcommand that has already logged why it
// failed.
var errReported = errors.New("failure already logged")

// flagErr maps cliflags.Parse's error to run's: nil for help (printed to
// stdout: success), errUsage for a mistake (printed to stderr).
func flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return errUsage
}

// usageErr maps a subcommand package's usage error to errUsage (its
// message is already printed).
func usageErr(err error) error {
	if errors.Is(err, openapi.ErrUsage) {
		return errUsage
	}
	return err
}

const usage = `usage:
  idemgate --config FILE            run the proxy
  idemgate demo [--listen ADDR]     run the proxy in front of a built-in demo API
  idemgate validate --config FILE   check a config; print the routes it understood
  idemgate validate --against SPEC CONFIG   report writes of an OpenAPI document no route protects
  idemgate validate --diff OLD NEW  what a reload from config OLD to NEW applies, defers to a restart, refuses or does to retries
  idemgate healthcheck [--addr A]   probe the admin listener's /readyz; exit 0 if ready
  idemgate config [--config FILE]   print the effective config (defaults + file + IDEMGATE_* environment), secrets redacted
  idemgate routes import SPEC       print routes from an OpenAPI/Swagger document (see routes import -h)
  idemgate version                  print the version
  idemgate help                     print this help (also -h, --help)

Run "idemgate --config FILE -h" for the proxy's flags.
`

// run is main without the process: tests call it with their own context,
// arguments and outputs.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "" && len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, usage)
		return nil
	}
	switch cmd {
	case "config":
		return runConfig(args, stdout, stderr)
	case "":
		return runServe(ctx, args, stdout, stderr)
	case "demo":
		return runDemo(ctx, args, stdout, stderr)
	case "validate":
		return runValidate(args, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, args, stdout, stderr)
	case "routes":
		return usageErr(openapi.RunRoutes(args, stdout, stderr))
	case "version":
		fs := cliflags.New("version", "usage: idemgate version\n  Prints the version and, when known, the revision it was built from.\n")
		if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
			return flagErr(err)
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(stderr, "idemgate version: unexpected argument %q\n", fs.Arg(0))
			return errUsage
		}
		if rev := buildRevision(); rev != "" {
			fmt.Fprintln(stdout, "idemgate", version, rev)
		} else {
			fmt.Fprintln(stdout, "idemgate", version)
		}
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "idemgate: unknown command %q\n%s", cmd, usage)
	return errUsage
}
