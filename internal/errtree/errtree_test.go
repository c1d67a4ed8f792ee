package errtree

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestLeaves(t *testing.T) {
	a, b, c, d := errors.New("a"), errors.New("b"), errors.New("c"), errors.New("d")
	wrapped := fmt.Errorf("w: %w", errors.Join(c, d)) // a single wrapper is a leaf
	for _, tc := range []struct {
		name string
		err  error
		want []error
	}{
		{"nil", nil, nil},
		{"one", a, []error{a}},
		{"joined", errors.Join(a, b), []error{a, b}},
		{"nested", errors.Join(a, errors.Join(b, errors.Join(c)), d), []error{a, b, c, d}},
		{"several %w", fmt.Errorf("%w and %w", a, errors.Join(b, c)), []error{a, b, c}},
		{"wrapper", errors.Join(wrapped, a), []error{wrapped, a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := slices.Collect(Leaves(tc.err)); !slices.Equal(got, tc.want) {
				t.Errorf("Leaves = %v; want %v", got, tc.want)
			}
		})
	}
}

func TestLeavesStops(t *testing.T) {
	a, b, c := errors.New("a"), errors.New("b"), errors.New("c")
	var got []error
	for e := range Leaves(errors.Join(a, errors.Join(b, c))) {
		got = append(got, e)
		if e == b {
			break
		}
	}
	if !slices.Equal(got, []error{a, b}) {
		t.Errorf("got %v before break; want [a b]", got)
	}
}
