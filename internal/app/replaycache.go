package app

import (
	"github.com/idemgate/idemgate/internal/metric"
	"github.com/idemgate/idemgate/keystore/compressed"
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

// openCacheStats exports what the compressing store keeps of the answers
// it opened last (idemgate_open_cache_*), where no replay cache does it.
func openCacheStats(c *compressed.Store) metric.Stats[compressed.OpenCacheStats] {
	return metric.Stats[compressed.OpenCacheStats]{
		Read: func() (compressed.OpenCacheStats, bool) { return c.OpenCacheStats(), true },
		Series: []metric.Stat[compressed.OpenCacheStats]{
			metric.CounterStat("idemgate_open_cache_hits_total",
				"Compressed answers replayed without decoding them: their frame was opened lately (store.compression).",
				func(s compressed.OpenCacheStats) float64 { return float64(s.Hits) }),
			metric.GaugeStat("idemgate_open_cache_entries",
				"Opened compressed answers held to be replayed again.",
				func(s compressed.OpenCacheStats) float64 { return float64(s.Entries) }),
			metric.GaugeStat("idemgate_open_cache_bytes",
				"Bytes held by the opened compressed answers (each frame and body, plus 96).",
				func(s compressed.OpenCacheStats) float64 { return float64(s.Bytes) }),
		},
	}
}
