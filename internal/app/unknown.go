package app

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/keystore"
)

// unknownRecordsDesc is the gauge of held records (DESIGN.md, Unknown
// outcomes): unknown records in the whole store, which wait for an
// operator's resolution.
var unknownRecordsDesc = prometheus.NewDesc("idemgate_unknown_records",
	"Unknown records in the store now (unknown_outcome: hold): keyed writes whose outcome is unknown, held until an operator resolves them. Counted by a listing of the store at most once a minute.", nil, nil)

// unknownRecordsEvery is how often a scrape may list the store: a Redis
// listing SCANs every master.
const unknownRecordsEvery = time.Minute

// unknownCollector counts the store's unknown records at a scrape, reusing
// the last count for unknownRecordsEvery; a listing that fails leaves the
// series out of that scrape. A listing that skipped damaged values
// (keystore.DamagedError) counts the unknown records it could read: one
// unreadable value must not silence the alert on the others.
type unknownCollector struct {
	s   keystore.UnknownStore
	now func() time.Time

	mu    sync.Mutex // protects at, n, ok
	at    time.Time
	n     int
	valid bool
}

func (c *unknownCollector) Describe(ch chan<- *prometheus.Desc) { ch <- unknownRecordsDesc }

func (c *unknownCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := c.now(); !c.valid || now.Sub(c.at) >= unknownRecordsEvery {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		recs, err := c.s.Unknown(ctx, 0)
		cancel()
		if _, damaged := errors.AsType[*keystore.DamagedError](err); err != nil && !damaged {
			c.valid = false
			return
		}
		c.at, c.n, c.valid = now, len(recs), true
	}
	ch <- prometheus.MustNewConstMetric(unknownRecordsDesc, prometheus.GaugeValue, float64(c.n))
}

// registerUnknownGauge exports idemgate_unknown_records for a store that
// keeps unknown records.
func registerUnknownGauge(reg prometheus.Registerer, st keystore.Store) {
	if us, ok := st.(keystore.UnknownStore); ok {
		reg.MustRegister(&unknownCollector{s: us, now: time.Now})
	}
}
