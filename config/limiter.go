package config

import (
	"fmt"
	"math"
	"time"
)

// PerPeriod returns the edge rate as the limiter counts it: whole requests
// per period. A whole rate is per second; any other is in milli-requests
// per 1000 s (nginx's own precision), which is the same rate exactly. A
// rate of 0 (no limit) is 0 per second. [Config.Validate] refuses a rate
// that has no such form.
func (e EdgeLimit) PerPeriod() (requests int, per time.Duration, err error) {
	r := e.Rate
	switch {
	case r == 0:
		return 0, time.Second, nil
	case r == math.Trunc(r) && r >= 1 && r <= 1e9:
		return int(r), time.Second, nil
	}
	milli := math.Round(r * 1000)
	if milli < 1 || milli > 1e12 || math.Abs(milli-r*1000) > 1e-6*milli {
		return 0, 0, fmt.Errorf("%v: want at most 1e9 requests per second, with at most three decimals, and at least 0.001", r)
	}
	return int(milli), 1000 * time.Second, nil
}
