// Command idemgate is the idempotency reverse proxy. It is configured by one
// YAML file of routes (see README.md).
//
//	idemgate --config FILE            run the proxy
//	idemgate demo [--listen ADDR]     run the proxy in front of a built-in demo API
//	idemgate validate --config FILE   check a config and print the routes it has
//	idemgate version                  print the version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemgate/idemgate/internal/openapi"
)

// version is stamped at build time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "idemgate:", err)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

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
  idemgate healthcheck [--addr A]   probe the admin listener's /readyz; exit 0 if ready
  idemgate routes import SPEC       print routes from an OpenAPI/Swagger document (see routes import -h)
  idemgate version                  print the version
`

// run is main without the process: tests call it with their own context,
// arguments and outputs.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := ""
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
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
		fmt.Fprintln(stdout, "idemgate", version)
		return nil
	case "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "idemgate: unknown command %q\n%s", cmd, usage)
	return errUsage
}
