// Package cliflags parses a subcommand's flags the way every idemgate
// subcommand does: help is asked for on purpose, so it goes to stdout and
// succeeds; a mistake goes to stderr and fails.
package cliflags

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
)

// New returns a flag set for the subcommand name (such as "validate") whose
// usage is usage (one or more lines, ending in a newline) followed by the
// flags' defaults.
func New(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		var n int
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(fs.Output(), "flags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// Parse parses args with fs. -h, -help or --help prints fs's usage to
// stdout and returns [flag.ErrHelp], which the caller turns into success;
// any other problem prints its message and the usage to stderr and returns
// the error. Afterwards fs writes to stderr.
func Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.SetOutput(stderr)
	if errors.Is(err, flag.ErrHelp) {
		_, werr := stdout.Write(buf.Bytes())
		return errors.Join(err, werr)
	}
	if err != nil {
		stderr.Write(buf.Bytes())
	}
	return err
}
