package app

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/keystore"
)

// listingStore answers Unknown with recs and err, counting the listings.
type listingStore struct {
	keystore.UnknownStore // nil: only Unknown is called
	recs                  []keystore.Record
	err                   error
	calls                 int
}

func (s *listingStore) Unknown(context.Context, int) ([]keystore.Record, error) {
	s.calls++
	return s.recs, s.err
}

// idemgate_unknown_records: the count of a listing, reused for a minute; a
// listing that skipped damaged values still counts what it read; one that
// failed leaves the series out.
func TestUnknownRecordsGauge(t *testing.T) {
	t.Parallel()
	two := []keystore.Record{{State: keystore.StateInFlight}, {State: keystore.StateInFlight}}
	damaged := &keystore.DamagedError{Count: 1, Names: []string{"idemgate:{00}"}, Err: errors.New("malformed record")}
	for _, tc := range []struct {
		name string
		recs []keystore.Record
		err  error
		want float64 // the gauge; -1: no series
	}{
		{"listed", two, nil, 2},
		{"damaged values skipped", two, damaged, 2},
		{"damaged, wrapped", two, fmt.Errorf("listing: %w", damaged), 2},
		{"failed", two, errors.New("redis: connection refused"), -1},
		{"none", nil, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &listingStore{recs: tc.recs, err: tc.err}
			now := time.Unix(1e9, 0)
			c := &unknownCollector{s: st, now: func() time.Time { return now }}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(c)
			for range 2 { // the second scrape within the minute reuses a count
				mfs, err := reg.Gather()
				if err != nil {
					t.Fatal(err)
				}
				got := -1.0
				if len(mfs) == 1 && len(mfs[0].GetMetric()) == 1 {
					got = mfs[0].GetMetric()[0].GetGauge().GetValue()
				}
				if got != tc.want {
					t.Fatalf("gauge %v; want %v (-1: no series)", got, tc.want)
				}
			}
			wantCalls := 1
			if tc.want < 0 {
				wantCalls = 2 // a failed listing is not reused
			}
			if st.calls != wantCalls {
				t.Errorf("%d listings; want %d", st.calls, wantCalls)
			}
		})
	}
}
