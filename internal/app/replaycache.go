package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/keystore/replaycache"
)

// replayCacheCollector exports the replay cache's counters
// (idemgate_replay_cache_*). The store metrics count every Reserve, the
// cached ones included; hits here are the Reserves that never reached
// Redis.
type replayCacheCollector struct{ c *replaycache.Store }

var (
	replayHitsDesc = prometheus.NewDesc("idemgate_replay_cache_hits_total",
		"Replays answered from this process's replay cache, without a round trip to the store.", nil, nil)
	replayMissesDesc = prometheus.NewDesc("idemgate_replay_cache_misses_total",
		"Reserves the replay cache passed to the store (first writes, claims in flight, answers not cached).", nil, nil)
	replayPurgesDesc = prometheus.NewDesc("idemgate_replay_cache_purges_total",
		"Times the replay cache was emptied: its invalidation subscription was (re)made, or the store was reset.", nil, nil)
	replayEntriesDesc = prometheus.NewDesc("idemgate_replay_cache_entries",
		"Answers held in the replay cache.", nil, nil)
	replayBytesDesc = prometheus.NewDesc("idemgate_replay_cache_bytes",
		"Bytes accounted to the answers held in the replay cache (each answer's size plus 256).", nil, nil)
)

func (r replayCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- replayHitsDesc
	ch <- replayMissesDesc
	ch <- replayPurgesDesc
	ch <- replayEntriesDesc
	ch <- replayBytesDesc
}

func (r replayCacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := r.c.Stats()
	ch <- prometheus.MustNewConstMetric(replayHitsDesc, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(replayMissesDesc, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(replayPurgesDesc, prometheus.CounterValue, float64(s.Purges))
	ch <- prometheus.MustNewConstMetric(replayEntriesDesc, prometheus.GaugeValue, float64(s.Entries))
	ch <- prometheus.MustNewConstMetric(replayBytesDesc, prometheus.GaugeValue, float64(s.Bytes))
}
