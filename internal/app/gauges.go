package app

import (
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/metric"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// registerStoreGauges exports what the store's backend knows of its own
// state: the memory store's fill and limits, or the Redis client's
// connection pool. Each family exists only with its backend.
func registerStoreGauges(reg prometheus.Registerer, st builtStore) {
	if st.mem != nil {
		reg.MustRegister(memstoreStats(st.mem))
	}
	if st.client != nil {
		reg.MustRegister(redisPoolStats(st.client))
	}
	if r := st.redis; r != nil {
		// Read at each scrape; zero with store.redis.auto_pipeline false.
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idemgate_store_pipelines_total",
				Help: "Pipelines of two store calls or more sent to Redis (store.redis.auto_pipeline): calls made while Redis was busy with earlier ones, sent together."},
				func() float64 { return float64(r.PipelineStats().Batches) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "idemgate_store_pipelined_calls_total",
				Help: "Store calls sent to Redis in those pipelines; the calls sent alone are in neither family."},
				func() float64 { return float64(r.PipelineStats().Calls) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "idemgate_store_redis_functions",
				Help: "1 while the store's scripts run as Redis Functions (FCALL), 0 once Redis refused them (a Redis before 7.0, an ACL user without fcall or function|load) and they run with EVALSHA."},
				func() float64 {
					if r.Functions() {
						return 1
					}
					return 0
				}),
		)
	}
}

// memstoreStats reads the memory store's counts at each scrape.
func memstoreStats(st *memstore.Store) metric.Stats[*memstore.Store] {
	return metric.Stats[*memstore.Store]{
		Read: func() (*memstore.Store, bool) { return st, true },
		Series: []metric.Stat[*memstore.Store]{
			metric.GaugeStat("idemgate_memstore_entries",
				"Records the memory store holds now (store.backend memory).",
				func(s *memstore.Store) float64 { return float64(s.Len()) }),
			metric.GaugeStat("idemgate_memstore_bytes",
				"Bytes accounted to the memory store's records now (store.backend memory).",
				func(s *memstore.Store) float64 { return float64(s.Bytes()) }),
			metric.GaugeStat("idemgate_memstore_max_entries",
				"store.memory.max_entries: when the memory store holds this many records, new claims get 503 idempotency_unavailable.",
				func(s *memstore.Store) float64 { n, _ := s.Limits(); return float64(n) }),
			metric.GaugeStat("idemgate_memstore_max_bytes",
				"store.memory.max_bytes: when the memory store's records account for this many bytes, new claims get 503 idempotency_unavailable.",
				func(s *memstore.Store) float64 { _, n := s.Limits(); return float64(n) }),
		},
	}
}

// redisPoolStats reads the store's Redis client's PoolStats at each
// scrape (go-redis sums them over a Cluster's nodes). The limiters' and
// session locks' clients are not counted: the store's claims are what a
// starved pool hurts.
func redisPoolStats(c redis.UniversalClient) metric.Stats[*redis.PoolStats] {
	return metric.Stats[*redis.PoolStats]{
		Read: func() (*redis.PoolStats, bool) { s := c.PoolStats(); return s, s != nil },
		Series: []metric.Stat[*redis.PoolStats]{
			metric.CounterStat("idemgate_redis_pool_hits_total",
				"Times the store's Redis client found a free connection in its pool.",
				func(s *redis.PoolStats) float64 { return float64(s.Hits) }),
			metric.CounterStat("idemgate_redis_pool_misses_total",
				"Times the store's Redis client found no free connection in its pool and dialed one.",
				func(s *redis.PoolStats) float64 { return float64(s.Misses) }),
			metric.CounterStat("idemgate_redis_pool_timeouts_total",
				"Times a store call waited for a pooled Redis connection longer than the pool timeout (the pool is too small for the load).",
				func(s *redis.PoolStats) float64 { return float64(s.Timeouts) }),
			metric.GaugeStat("idemgate_redis_pool_total_conns",
				"Connections in the store's Redis client pool now.",
				func(s *redis.PoolStats) float64 { return float64(s.TotalConns) }),
			metric.GaugeStat("idemgate_redis_pool_idle_conns",
				"Idle connections in the store's Redis client pool now.",
				func(s *redis.PoolStats) float64 { return float64(s.IdleConns) }),
		},
	}
}

var certExpiryDesc = prometheus.NewDesc("idemgate_tls_certificate_expiry_timestamp_seconds",
	"Unix time when the served certificate for a domain expires (tls.mode files or acme), by domain.", []string{"domain"}, nil)

// registerTLSGauges exports the served certificates' expiry when TLS is on.
func registerTLSGauges(reg prometheus.Registerer, ts *tlsState) {
	if ts == nil || ts.config == nil {
		return
	}
	reg.MustRegister(certCollector{ts})
}

// certCollector reads the served certificates at each scrape: a file pair
// reloaded or a certificate renewed shows at the next scrape.
type certCollector struct{ ts *tlsState }

func (c certCollector) Describe(ch chan<- *prometheus.Desc) { ch <- certExpiryDesc }

func (c certCollector) Collect(ch chan<- prometheus.Metric) {
	for domain, end := range c.ts.expiries() {
		ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(end.Unix()), domain)
	}
}

// leafExpiries maps each name of leaf (its DNS names, or its subject's
// common name without any) to its expiry.
func leafExpiries(leaf *x509.Certificate, into map[string]time.Time) {
	names := leaf.DNSNames
	if len(names) == 0 && leaf.Subject.CommonName != "" {
		names = []string{leaf.Subject.CommonName}
	}
	for _, n := range names {
		into[n] = leaf.NotAfter
	}
}
