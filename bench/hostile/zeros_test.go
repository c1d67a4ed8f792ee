package main

import (
	"encoding/json"
	"testing"
)

func TestZeros(t *testing.T) {
	for _, n := range []int{3, 4, 5, 1 << 20} {
		b := zeros(n)
		if len(b) != n || !json.Valid(b) {
			t.Fatal(n, len(b))
		}
	}
}
