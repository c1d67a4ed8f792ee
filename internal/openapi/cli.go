package openapi

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemgate/idemgate/internal/cliflags"
)

// ErrUsage is returned after a usage message was printed to stderr.
var ErrUsage = errors.New("usage")

// importUsage is the usage of `idemgate routes import`.
const importUsage = `usage: idemgate routes import SPEC [--base-path P] [--out FILE | --merge CONFIG [--dry-run]] [--strict]
  SPEC is an OpenAPI 3.0/3.1 or Swagger 2.0 document (YAML or JSON, local file).
  Prints a routes: section: one route per POST, PUT, PATCH and DELETE operation,
  named by operationId; GET and HEAD only where x-idempotency.session or
  x-ratelimit asks. Problems go to stderr, one line each with the operation's
  JSON pointer.
`

// RunRoutes runs `idemgate routes SUBCOMMAND ...`; args start after
// "routes".
func RunRoutes(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, importUsage)
		return nil
	}
	if len(args) == 0 || args[0] != "import" {
		fmt.Fprint(stderr, importUsage)
		return ErrUsage
	}
	return RunImport(args[1:], stdout, stderr)
}

// RunImport runs `idemgate routes import`; args start after "import". The
// routes go to stdout (or --out), problems to stderr. It returns an error
// for a document that cannot be read, with --strict when there were
// problems, and [ErrUsage] after printing the usage. -h prints the usage to
// stdout and returns nil.
func RunImport(args []string, stdout, stderr io.Writer) error {
	fs := cliflags.New("routes import", importUsage)
	basePath := fs.String("base-path", "", "base path for every route, replacing the document's servers/basePath (\"/\" for none)")
	out := fs.String("out", "", "write the routes to FILE instead of stdout")
	mergeInto := fs.String("merge", "", "update CONFIG's routes in place")
	dryRun := fs.Bool("dry-run", false, "with --merge: print the diff, change nothing")
	strict := fs.Bool("strict", false, "exit non-zero when any problem was reported")
	keyHeader := fs.String("key-header", "", "the idempotency key header (default: CONFIG's idempotency.header with --merge, else Idempotency-Key)")
	var specs []string
	for {
		if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return ErrUsage
		}
		if fs.NArg() == 0 {
			break
		}
		specs = append(specs, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(specs) != 1:
		fmt.Fprintf(stderr, "idemgate routes import: want one SPEC; got %d\n%s", len(specs), importUsage)
		return ErrUsage
	case *out != "" && *mergeInto != "":
		fmt.Fprintf(stderr, "idemgate routes import: --out and --merge exclude each other\n%s", importUsage)
		return ErrUsage
	case *dryRun && *mergeInto == "":
		fmt.Fprintf(stderr, "idemgate routes import: --dry-run needs --merge CONFIG\n%s", importUsage)
		return ErrUsage
	case *basePath != "" && !strings.HasPrefix(*basePath, "/"):
		fmt.Fprintf(stderr, "idemgate routes import: --base-path %q must start with \"/\"\n%s", *basePath, importUsage)
		return ErrUsage
	}
	spec, err := LoadSpec(specs[0])
	if err != nil {
		return err
	}
	var config []byte
	if *mergeInto != "" {
		if config, err = os.ReadFile(*mergeInto); err != nil {
			return err
		}
		if *keyHeader == "" {
			*keyHeader = configKeyHeader(config)
		}
	}
	res := Import(spec, Options{BasePath: *basePath, KeyHeader: *keyHeader})
	for _, p := range res.Problems {
		fmt.Fprintln(stderr, specs[0]+p.String()) // spec.yaml#/paths/...: a URI reference
	}
	switch {
	case *mergeInto != "":
		merged, notes, err := Merge(config, res)
		if err != nil {
			return fmt.Errorf("%s: %w", *mergeInto, err)
		}
		for _, n := range notes {
			fmt.Fprintf(stderr, "%s: %s\n", *mergeInto, n)
		}
		if *dryRun {
			_, err = stdout.Write(UnifiedDiff(*mergeInto, *mergeInto+" (merged)", config, merged))
		} else if string(merged) != string(config) {
			err = writeFileAtomic(*mergeInto, merged)
		}
		if err != nil {
			return err
		}
	case *out != "":
		if err := writeFileAtomic(*out, Render(spec, res)); err != nil {
			return err
		}
	default:
		if _, err := stdout.Write(Render(spec, res)); err != nil {
			return err
		}
	}
	if *strict && len(res.Problems) > 0 {
		return fmt.Errorf("%s: %d problems (--strict)", specs[0], len(res.Problems))
	}
	return nil
}

// writeFileAtomic replaces path with data through a temporary file in the
// same directory, keeping an existing file's mode.
func writeFileAtomic(path string, data []byte) error {
	mode := os.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		mode = st.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
