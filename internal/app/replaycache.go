package app

import (
	"github.com/idemgate/idemgate/internal/metric"
	"github.com/idemgate/idemgate/keystore/replaycache"
)

// replayCacheStats exports the replay cache's counters
// (idemgate_replay_cache_*). The store metrics count every Reserve, the
// cached ones included; hits here are the Reserves that never reached
// Redis.
func replayCacheStats(c *replaycache.Store) metric.Stats[replaycache.Stats] {
	return metric.Stats[replaycache.Stats]{
		Read: func() (replaycache.Stats, bool) { return c.Stats(), true },
		Series: []metric.Stat[replaycache.Stats]{
			metric.CounterStat("idemgate_replay_cache_hits_total",
				"Replays answered from this process's replay cache, without a round trip to the store.",
				func(s replaycache.Stats) float64 { return float64(s.Hits) }),
			metric.CounterStat("idemgate_replay_cache_misses_total",
				"Reserves the replay cache passed to the store (first writes, claims in flight, answers not cached).",
				func(s replaycache.Stats) float64 { return float64(s.Misses) }),
			metric.CounterStat("idemgate_replay_cache_purges_total",
				"Times the replay cache was emptied: its invalidation subscription was (re)made, or the store was reset.",
				func(s replaycache.Stats) float64 { return float64(s.Purges) }),
			metric.GaugeStat("idemgate_replay_cache_entries",
				"Answers held in the replay cache.",
				func(s replaycache.Stats) float64 { return float64(s.Entries) }),
			metric.GaugeStat("idemgate_replay_cache_bytes",
				"Bytes accounted to the answers held in the replay cache (each answer's size plus 256).",
				func(s replaycache.Stats) float64 { return float64(s.Bytes) }),
		},
	}
}
