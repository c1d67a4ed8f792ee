package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// maxProbes bounds the probe leases and states held at once (one per
// unknown record being probed; they expire with their keep).
const maxProbes = 1 << 16

// probeTable holds the probe leases and states of [keystore.UnknownStore]
// beside the records, by the store's clock.
type probeTable struct {
	mu sync.Mutex // protects m
	m  map[keystore.Key]*probeEntry
}

type probeEntry struct {
	owner    string
	leaseEnd time.Duration // offset from the store's base
	state    keystore.ProbeState
	hasState bool
	expires  time.Duration // when the entry is dropped
}

// sweep drops the entries whose keep and lease have ended. The caller
// holds t.mu.
func (t *probeTable) sweep(now time.Duration) {
	for k, e := range t.m {
		if now >= e.expires && now >= e.leaseEnd {
			delete(t.m, k)
		}
	}
}

// lockProbe checks ctx and s, locks the probe table and returns it, k's
// entry (nil if none) and the store's time. The caller unlocks t.mu; on an
// error nothing is locked.
func (s *Store) lockProbe(ctx context.Context, k keystore.Key) (t *probeTable, e *probeEntry, now time.Duration, err error) {
	if err := s.check(ctx); err != nil {
		return nil, nil, 0, err
	}
	now = s.now()
	t = &s.probes
	t.mu.Lock()
	return t, t.m[k], now, nil
}

// AcquireProbe implements [keystore.UnknownStore].
func (s *Store) AcquireProbe(ctx context.Context, k keystore.Key, ttl time.Duration) (keystore.ProbeLease, bool, error) {
	t, e, now, err := s.lockProbe(ctx, k)
	if err != nil {
		return keystore.ProbeLease{}, false, err
	}
	defer t.mu.Unlock()
	if e != nil && now < e.leaseEnd {
		return keystore.ProbeLease{}, false, nil
	}
	if e == nil {
		if t.m == nil {
			t.m = make(map[keystore.Key]*probeEntry)
		}
		if len(t.m) >= maxProbes {
			t.sweep(now)
			if len(t.m) >= maxProbes {
				return keystore.ProbeLease{}, false, keystore.ErrFull
			}
		}
		e = &probeEntry{}
		t.m[k] = e
	}
	if now >= e.expires {
		e.state, e.hasState = keystore.ProbeState{}, false
	}
	e.owner = keystore.NewProbeOwner()
	e.leaseEnd = now + ttl
	e.expires = max(e.expires, e.leaseEnd)
	return keystore.ProbeLease{Owner: e.owner, State: e.state}, true, nil
}

// EndProbe implements [keystore.UnknownStore].
func (s *Store) EndProbe(ctx context.Context, k keystore.Key, owner string, st keystore.ProbeState, hold, keep time.Duration) error {
	t, e, now, err := s.lockProbe(ctx, k)
	if err != nil {
		return err
	}
	defer t.mu.Unlock()
	if e == nil || e.owner != owner || now >= e.leaseEnd {
		return keystore.ErrLeaseLost
	}
	e.state, e.hasState = st, true
	e.leaseEnd = now + hold
	e.expires = now + max(keep, hold)
	return nil
}

// ProbeStatus implements [keystore.UnknownStore].
func (s *Store) ProbeStatus(ctx context.Context, k keystore.Key) (keystore.ProbeState, bool, error) {
	t, e, now, err := s.lockProbe(ctx, k)
	if err != nil {
		return keystore.ProbeState{}, false, err
	}
	defer t.mu.Unlock()
	if e == nil || !e.hasState || now >= e.expires {
		return keystore.ProbeState{}, false, nil
	}
	return e.state, true, nil
}
