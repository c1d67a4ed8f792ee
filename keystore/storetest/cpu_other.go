//go:build !unix

package storetest

import "time"

// processCPU is not measured outside Unix.
func processCPU() time.Duration { return 0 }
