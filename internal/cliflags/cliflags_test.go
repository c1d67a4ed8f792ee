package cliflags

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		args             []string
		err              error // nil, flag.ErrHelp, or any error (errOther)
		stdout, stderr   string
		noStdout, noErrs bool
	}{
		{name: "help", args: []string{"-h"}, err: flag.ErrHelp, stdout: "usage: idemgate x [--n N]\nflags:\n  -n int"},
		{name: "long help", args: []string{"--help"}, err: flag.ErrHelp, stdout: "usage: idemgate x"},
		{name: "help after a flag", args: []string{"-n", "2", "-help"}, err: flag.ErrHelp, stdout: "usage: idemgate x"},
		{name: "unknown flag", args: []string{"--bogus"}, err: errOther, stderr: "flag provided but not defined: -bogus\nusage: idemgate x"},
		{name: "bad value", args: []string{"-n", "two"}, err: errOther, stderr: "invalid value \"two\""},
		{name: "fine", args: []string{"-n", "2", "rest"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := New("x", "usage: idemgate x [--n N]\n")
			fs.Int("n", 1, "a number")
			var stdout, stderr bytes.Buffer
			err := Parse(fs, tt.args, &stdout, &stderr)
			switch {
			case tt.err == nil && err != nil, tt.err == flag.ErrHelp && !errors.Is(err, flag.ErrHelp),
				tt.err == errOther && (err == nil || errors.Is(err, flag.ErrHelp)):
				t.Fatalf("Parse = %v; want %v", err, tt.err)
			}
			if !strings.Contains(stdout.String(), tt.stdout) || tt.stdout == "" && stdout.Len() > 0 {
				t.Errorf("stdout %q; want %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) || tt.stderr == "" && stderr.Len() > 0 {
				t.Errorf("stderr %q; want %q", stderr.String(), tt.stderr)
			}
			if fs.Output() != &stderr {
				t.Error("the flag set does not write to stderr afterwards")
			}
		})
	}
}

var errOther = errors.New("any error but flag.ErrHelp")
