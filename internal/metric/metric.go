// Package metric holds the one shape of each kind of idemgate collector: a
// constructor per kind that registers it through a [promauto.Factory] (so on
// a registry the caller owns, never the global one), and the latency
// histograms' buckets, so that every duration family (requests, upstream,
// store, session waits) has the same.
package metric

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Counter makes the counter name on f.
func Counter(f promauto.Factory, name, help string) prometheus.Counter {
	return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec makes the counter family name, with labels, on f.
func CounterVec(f promauto.Factory, name, help string, labels ...string) *prometheus.CounterVec {
	return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge makes the gauge name on f.
func Gauge(f promauto.Factory, name, help string) prometheus.Gauge {
	return f.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeVec makes the gauge family name, with labels, on f.
func GaugeVec(f promauto.Factory, name, help string, labels ...string) *prometheus.GaugeVec {
	return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// Latency makes the latency histogram family name, with labels, on f
// (histogramOpts).
func Latency(f promauto.Factory, name, help string, labels ...string) *prometheus.HistogramVec {
	return f.NewHistogramVec(histogramOpts(name, help), labels)
}

// buckets suit a proxy: 100 µs (a store call takes 50–150 µs, a replay
// about 0.1 ms) to a minute (the default upstream timeout).
var buckets = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// histogramOpts returns the options of a latency histogram named name. The
// histograms are also native histograms for servers that scrape them
// (ecosystem.md §4.3); text scrapes get the fixed buckets.
func histogramOpts(name, help string) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets[:],
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// Stat is one unlabelled series that a [Stats] collector reads from a
// snapshot S. Make it with [CounterStat] or [GaugeStat].
type Stat[S any] struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(S) float64
}

// CounterStat is the counter name, read from a snapshot by value.
func CounterStat[S any](name, help string, value func(S) float64) Stat[S] {
	return Stat[S]{prometheus.NewDesc(name, help, nil, nil), prometheus.CounterValue, value}
}

// GaugeStat is the gauge name, read from a snapshot by value.
func GaugeStat[S any](name, help string, value func(S) float64) Stat[S] {
	return Stat[S]{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, value}
}

// Stats is a collector of counts that something keeps itself: at each
// scrape it takes one snapshot with Read (false: export nothing this
// time), so that the series agree with each other, and exports each of
// Series from it.
type Stats[S any] struct {
	Read   func() (S, bool)
	Series []Stat[S]
}

// Describe implements [prometheus.Collector].
func (c Stats[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.Series {
		ch <- s.desc
	}
}

// Collect implements [prometheus.Collector].
func (c Stats[S]) Collect(ch chan<- prometheus.Metric) {
	v, ok := c.Read()
	if !ok {
		return
	}
	for _, s := range c.Series {
		ch <- prometheus.MustNewConstMetric(s.desc, s.typ, s.value(v))
	}
}
