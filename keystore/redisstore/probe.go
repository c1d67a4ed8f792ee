package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore"
)

// Reconcile probes' leases and states ([keystore.UnknownStore]) live beside
// the records, in plain keys that share the record's hash tag but never
// match a record's pattern (P + "{*"):
//
//	P + "probe:{" + hex + "}"        the lease: its owner token, PX the lease
//	P + "probe:{" + hex + "}:state"  the state (keystore.EncodeProbeState), PX keep
//
// Taking the lease is SET NX PX; ending it is a compare-and-set in a
// WATCH/MULTI transaction: no script.

func (s *Store) probeKeys(k keystore.Key) (lease, state string) {
	lease = s.prefix + "probe:{" + k.String() + "}"
	return lease, lease + ":state"
}

// AcquireProbe implements [keystore.UnknownStore] in one round trip: SET NX
// PX and GET, pipelined.
func (s *Store) AcquireProbe(ctx context.Context, k keystore.Key, ttl time.Duration) (keystore.ProbeLease, bool, error) {
	if err := s.check(ctx); err != nil {
		return keystore.ProbeLease{}, false, err
	}
	lease, state := s.probeKeys(k)
	owner := keystore.NewProbeOwner()
	var set *redis.BoolCmd
	var get *redis.StringCmd
	_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		set = p.SetNX(ctx, lease, owner, max(ttl, time.Millisecond))
		get = p.Get(ctx, state)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return keystore.ProbeLease{}, false, wrapErr("acquire probe", err)
	}
	if !set.Val() {
		return keystore.ProbeLease{}, false, nil
	}
	l := keystore.ProbeLease{Owner: owner}
	if v, err := get.Result(); err == nil {
		l.State, _ = keystore.DecodeProbeState(v) // a damaged state starts afresh
	}
	return l, true, nil
}

// EndProbe implements [keystore.UnknownStore]: WATCH the lease, check its
// owner, then set the state and the lease's new end (or delete it) in one
// MULTI. A lease that changed meanwhile fails the transaction: ErrLeaseLost.
func (s *Store) EndProbe(ctx context.Context, k keystore.Key, owner string, st keystore.ProbeState, hold, keep time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	lease, state := s.probeKeys(k)
	enc := keystore.EncodeProbeState(st)
	err := s.client.Watch(ctx, func(tx *redis.Tx) error {
		cur, err := tx.Get(ctx, lease).Result()
		if errors.Is(err, redis.Nil) || err == nil && cur != owner {
			return keystore.ErrLeaseLost
		}
		if err != nil {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.Set(ctx, state, enc, max(keep, hold, time.Millisecond))
			if hold > 0 {
				p.Set(ctx, lease, owner, hold)
			} else {
				p.Del(ctx, lease)
			}
			return nil
		})
		return err
	}, lease)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, keystore.ErrLeaseLost), errors.Is(err, redis.TxFailedErr):
		return keystore.ErrLeaseLost
	}
	return wrapErr("end probe", err)
}

// ProbeStatus implements [keystore.UnknownStore].
func (s *Store) ProbeStatus(ctx context.Context, k keystore.Key) (keystore.ProbeState, bool, error) {
	if err := s.check(ctx); err != nil {
		return keystore.ProbeState{}, false, err
	}
	_, state := s.probeKeys(k)
	v, err := s.client.Get(ctx, state).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return keystore.ProbeState{}, false, nil
	case err != nil:
		return keystore.ProbeState{}, false, wrapErr("probe status", err)
	}
	st, err := keystore.DecodeProbeState(v)
	if err != nil {
		return keystore.ProbeState{}, false, err
	}
	return st, true, nil
}
