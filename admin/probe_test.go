package admin

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
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
