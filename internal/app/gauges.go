package app

import (
	"crypto/x509"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore/memstore"
)

// registerStoreGauges exports what the store's backend knows of its own
// state: the memory store's fill and limits, or the Redis client's
// connection pool. Each family exists only with its backend.
func registerStoreGauges(reg prometheus.Registerer, st builtStore) {
	if st.mem != nil {
		reg.MustRegister(memstoreCollector{st.mem})
	}
	if st.client != nil {
		reg.MustRegister(redisPoolCollector{st.client})
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
		)
	}
}

var (
	memEntriesDesc = prometheus.NewDesc("idemgate_memstore_entries",
		"Records the memory store holds now (store.backend memory).", nil, nil)
	memBytesDesc = prometheus.NewDesc("idemgate_memstore_bytes",
		"Bytes accounted to the memory store's records now (store.backend memory).", nil, nil)
	memMaxEntriesDesc = prometheus.NewDesc("idemgate_memstore_max_entries",
		"store.memory.max_entries: when the memory store holds this many records, new claims get 503 idempotency_unavailable.", nil, nil)
	memMaxBytesDesc = prometheus.NewDesc("idemgate_memstore_max_bytes",
		"store.memory.max_bytes: when the memory store's records account for this many bytes, new claims get 503 idempotency_unavailable.", nil, nil)
)

// memstoreCollector reads the memory store's counts at each scrape.
type memstoreCollector struct{ s *memstore.Store }

func (c memstoreCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- memEntriesDesc
	ch <- memBytesDesc
	ch <- memMaxEntriesDesc
	ch <- memMaxBytesDesc
}

func (c memstoreCollector) Collect(ch chan<- prometheus.Metric) {
	maxEntries, maxBytes := c.s.Limits()
	ch <- prometheus.MustNewConstMetric(memEntriesDesc, prometheus.GaugeValue, float64(c.s.Len()))
	ch <- prometheus.MustNewConstMetric(memBytesDesc, prometheus.GaugeValue, float64(c.s.Bytes()))
	ch <- prometheus.MustNewConstMetric(memMaxEntriesDesc, prometheus.GaugeValue, float64(maxEntries))
	ch <- prometheus.MustNewConstMetric(memMaxBytesDesc, prometheus.GaugeValue, float64(maxBytes))
}

var (
	poolHitsDesc = prometheus.NewDesc("idemgate_redis_pool_hits_total",
		"Times the store's Redis client found a free connection in its pool.", nil, nil)
	poolMissesDesc = prometheus.NewDesc("idemgate_redis_pool_misses_total",
		"Times the store's Redis client found no free connection in its pool and dialed one.", nil, nil)
	poolTimeoutsDesc = prometheus.NewDesc("idemgate_redis_pool_timeouts_total",
		"Times a store call waited for a pooled Redis connection longer than the pool timeout (the pool is too small for the load).", nil, nil)
	poolTotalDesc = prometheus.NewDesc("idemgate_redis_pool_total_conns",
		"Connections in the store's Redis client pool now.", nil, nil)
	poolIdleDesc = prometheus.NewDesc("idemgate_redis_pool_idle_conns",
		"Idle connections in the store's Redis client pool now.", nil, nil)
)

// redisPoolCollector reads the store's Redis client's PoolStats at each
// scrape (go-redis sums them over a Cluster's nodes). The limiters' and
// session locks' clients are not counted: the store's claims are what a
// starved pool hurts.
type redisPoolCollector struct{ c redis.UniversalClient }

func (c redisPoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolHitsDesc, poolMissesDesc, poolTimeoutsDesc, poolTotalDesc, poolIdleDesc} {
		ch <- d
	}
}

func (c redisPoolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.c.PoolStats()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(poolHitsDesc, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(poolMissesDesc, prometheus.CounterValue, float64(s.Misses))
	ch <- prometheus.MustNewConstMetric(poolTimeoutsDesc, prometheus.CounterValue, float64(s.Timeouts))
	ch <- prometheus.MustNewConstMetric(poolTotalDesc, prometheus.GaugeValue, float64(s.TotalConns))
	ch <- prometheus.MustNewConstMetric(poolIdleDesc, prometheus.GaugeValue, float64(s.IdleConns))
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
