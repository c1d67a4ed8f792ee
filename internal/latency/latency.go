// Package latency holds the one shape of idemgate's latency histograms, so
// that every duration family (requests, upstream, store, session waits)
// has the same buckets.
package latency

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// buckets suit a proxy: 100 µs (a store call takes 50–150 µs, a replay
// about 0.1 ms) to a minute (the default upstream timeout).
var buckets = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// HistogramOpts returns the options of a latency histogram named name. The
// histograms are also native histograms for servers that scrape them
// (ecosystem.md §4.3); text scrapes get the fixed buckets.
func HistogramOpts(name, help string) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets[:],
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: time.Hour,
	}
}
