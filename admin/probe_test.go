package admin

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestUnknownProbeState: an unknown record is listed with its reconcile
// probe state (a state of another claim of the key is not shown), and a
// record a probe resolved shows resolved_by: probe when inspected.
func TestUnknownProbeState(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	ctx := context.Background()
	k, id := f.unknownRecord(t, "probed", "pay")
	other, _ := f.unknownRecord(t, "stale", "pay")
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		k  keystore.Key
		st keystore.ProbeState
	}{
		{k, keystore.ProbeState{ClaimID: id, Probes: 2, Last: keystore.ProbeAbsent, LastAt: at, AbsentSince: at}},
		{other, keystore.ProbeState{ClaimID: keystore.NewClaimID(), Probes: 5, Last: keystore.ProbeError, LastAt: at}},
	} {
		l, ok, err := f.store.AcquireProbe(ctx, c.k, time.Minute)
		if err != nil || !ok {
			t.Fatalf("AcquireProbe = %v, %v", ok, err)
		}
		if err := f.store.EndProbe(ctx, c.k, l.Owner, c.st, 0, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	a := f.admin(t, "GET", "/admin/unknown", "")
	list, _ := a.body["unknown"].([]any)
	if a.status != 200 || len(list) != 2 {
		t.Fatalf("list unknown = %d %s; want two records", a.status, a.raw)
	}
	for _, it := range list {
		got := it.(map[string]any)
		probe, has := got["probe"].(map[string]any)
		switch got["key"] {
		case k.String():
			if !has || probe["probes"] != float64(2) || probe["last"] != "absent" || probe["absent_since"] != "2026-12-01T10:00:00Z" {
				t.Errorf("probed record's probe = %v; want 2 probes, the last absent, absent since 10:00", got["probe"])
			}
		default:
			if has {
				t.Errorf("a record whose probe state is another claim's shows %v; want none", probe)
			}
		}
	}
	// A probe resolves it.
	l, _, _ := f.store.AcquireProbe(ctx, k, time.Minute)
	if err := f.store.Resolve(ctx, k, id, &keystore.Response{Status: 201, Body: []byte("found")}); err != nil {
		t.Fatal(err)
	}
	f.store.EndProbe(ctx, k, l.Owner, keystore.ProbeState{ClaimID: id, Probes: 3, Last: keystore.ProbeFound, LastAt: at, Resolved: true}, 0, time.Hour)
	a = f.admin(t, "GET", "/admin/claims/"+k.String(), "")
	if a.status != 200 || a.body["state"] != "completed" || a.body["resolved_by"] != "probe" || a.body["probe"] != nil {
		t.Errorf("inspect = %d %s; want completed, resolved_by probe", a.status, a.raw)
	}
}

// probeStore is a memory store whose ProbeStatus fails for the keys in
// fail, and, while gate is open (not nil, not closed), waits for it or
// for the call's context to end, counting the calls under way; full (when
// not nil) is signalled when probeReaders calls are under way.
type probeStore struct {
	*memstore.Store
	fail         map[keystore.Key]bool
	gate, full   chan struct{}
	inside, most atomic.Int64
}

func (s *probeStore) ProbeStatus(ctx context.Context, k keystore.Key) (keystore.ProbeState, bool, error) {
	in := s.inside.Add(1)
	defer s.inside.Add(-1)
	for m := s.most.Load(); in > m && !s.most.CompareAndSwap(m, in); m = s.most.Load() {
	}
	if in == probeReaders && s.full != nil {
		select {
		case s.full <- struct{}{}:
		default:
		}
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return keystore.ProbeState{}, false, ctx.Err()
		}
	}
	if s.fail[k] {
		return keystore.ProbeState{}, false, errors.New("store unreachable")
	}
	return s.Store.ProbeStatus(ctx, k)
}

// probedRecords makes n unknown records, each probed once, and returns
// their keys.
func probedRecords(t *testing.T, f *fixture, n int) []keystore.Key {
	t.Helper()
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	keys := make([]keystore.Key, n)
	for i := range keys {
		k, id := f.unknownRecord(t, fmt.Sprintf("probed-%d", i), "pay")
		l, ok, err := f.store.AcquireProbe(ctx, k, time.Minute)
		if err != nil || !ok {
			t.Fatalf("AcquireProbe = %v, %v", ok, err)
		}
		if err := f.store.EndProbe(ctx, k, l.Owner, keystore.ProbeState{ClaimID: id, Probes: 1, Last: keystore.ProbeOther, LastAt: at}, 0, time.Hour); err != nil {
			t.Fatal(err)
		}
		keys[i] = k
	}
	return keys
}

// unknownRows lists unknown records and returns the rows by key, with
// the listing's probes_unread.
func unknownRows(t *testing.T, f *fixture) (map[string]map[string]any, float64) {
	t.Helper()
	a := f.admin(t, "GET", "/admin/unknown?limit=1000", "")
	if a.status != 200 {
		t.Fatalf("list unknown = %d %s", a.status, a.raw)
	}
	rows := map[string]map[string]any{}
	list, _ := a.body["unknown"].([]any)
	for _, it := range list {
		row := it.(map[string]any)
		rows[row["key"].(string)] = row
	}
	unread, _ := a.body["probes_unread"].(float64)
	return rows, unread
}

// TestUnknownProbeStateUnread: a row whose probe state cannot be read
// says so (probe_unread: true, counted in probes_unread), and the other
// rows keep theirs; when the listing's deadline passes before the states
// are read, every row says so and the listing still answers.
func TestUnknownProbeStateUnread(t *testing.T) {
	t.Parallel()
	t.Run("store error", func(t *testing.T) {
		t.Parallel()
		ps := &probeStore{fail: map[keystore.Key]bool{}}
		f := newFixture(t, token, func(o *Options) { ps.Store = o.Store.(*memstore.Store); o.Store = ps })
		keys := probedRecords(t, f, 3)
		ps.fail[keys[1]] = true
		rows, unread := unknownRows(t, f)
		if len(rows) != 3 || unread != 1 {
			t.Fatalf("%d rows, probes_unread %v; want 3, 1", len(rows), unread)
		}
		for i, k := range keys {
			row := rows[k.String()]
			_, hasProbe := row["probe"]
			if i == 1 {
				if row["probe_unread"] != true || hasProbe {
					t.Errorf("the row whose state failed = %v; want probe_unread: true, no probe", row)
				}
			} else if row["probe_unread"] != nil || !hasProbe {
				t.Errorf("row %d = %v; want its probe, no probe_unread", i, row)
			}
		}
	})
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		ps := &probeStore{gate: make(chan struct{})} // never opens: each read waits for the deadline
		f := newFixture(t, token, func(o *Options) {
			ps.Store = o.Store.(*memstore.Store)
			o.Store = ps
			o.Timeout = 200 * time.Millisecond
		})
		keys := probedRecords(t, f, 20)
		rows, unread := unknownRows(t, f)
		if len(rows) != 20 || unread != 20 {
			t.Fatalf("%d rows, probes_unread %v; want 20, 20", len(rows), unread)
		}
		for _, k := range keys {
			if row := rows[k.String()]; row["probe_unread"] != true {
				t.Errorf("row %s = %v; want probe_unread: true", k, row)
			}
		}
	})
}

// TestUnknownProbeStateBounded: a listing reads its rows' probe states
// probeReaders at a time, never more, and every row gets its state.
func TestUnknownProbeStateBounded(t *testing.T) {
	t.Parallel()
	ps := &probeStore{gate: make(chan struct{}), full: make(chan struct{}, 1)}
	f := newFixture(t, token, func(o *Options) {
		ps.Store = o.Store.(*memstore.Store)
		o.Store = ps
		o.Timeout = time.Minute
	})
	const n = 5 * probeReaders
	probedRecords(t, f, n)
	// The gate opens once probeReaders reads wait at it (or after 10s:
	// reads one at a time never fill it, and the listing's rows then
	// show it).
	go func() {
		select {
		case <-ps.full:
		case <-time.After(10 * time.Second):
		}
		close(ps.gate)
	}()
	rows, unread := unknownRows(t, f)
	if most := ps.most.Load(); most != probeReaders {
		t.Errorf("at most %d probe-state reads at once; want %d", most, probeReaders)
	}
	if len(rows) != n || unread != 0 {
		t.Fatalf("%d rows, probes_unread %v; want %d, 0", len(rows), unread, n)
	}
	for k, row := range rows {
		if p, _ := row["probe"].(map[string]any); p == nil || p["probes"] != float64(1) {
			t.Errorf("row %s = %v; want its probe state", k, row)
		}
	}
}
