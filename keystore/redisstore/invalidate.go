package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/rediskey"
	"github.com/idemgate/idemgate/keystore"
)

// InvalidationChannel is the Pub/Sub channel, after the key prefix, on
// which replicas tell each other's replay caches (keystore/replaycache) to
// drop a key. A message is the key in hex.
const InvalidationChannel = "replaycache:invalidate"

// channel returns the store's invalidation channel.
func (s *Store) channel() string { return s.prefix + InvalidationChannel }

// PublishInvalidation publishes k on the invalidation channel: every
// replica's replay cache drops it (replaycache.Invalidator).
func (s *Store) PublishInvalidation(ctx context.Context, k keystore.Key) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if err := s.client.Publish(ctx, s.channel(), k.String()).Err(); err != nil {
		return fmt.Errorf("redisstore: publish invalidation: %w", err)
	}
	return nil
}

// SubscribeInvalidations subscribes to the invalidation channel and calls
// drop for each key published, and resync each time the subscription is
// made or remade (go-redis reconnects by itself; what was published
// meanwhile is lost), until ctx is done (replaycache.Invalidator). It
// returns nil when ctx is done, or an error if the first subscription
// fails: Redis refused it (the channel not granted to the ACL user) or did
// not confirm it within the client's read timeout. (go-redis ignores a
// refused subscription in silence: see [rediskey.Confirm].)
func (s *Store) SubscribeInvalidations(ctx context.Context, drop func(keystore.Key), resync func()) error {
	ps := s.client.Subscribe(ctx)
	defer ps.Close()
	if err := ps.Subscribe(ctx, s.channel()); err != nil {
		return fmt.Errorf("redisstore: subscribe to invalidations: %w", err)
	}
	// The first reply is the subscription's confirmation, or its refusal.
	if err := rediskey.Confirm(ctx, ps, readTimeout(s.client)); err != nil {
		return fmt.Errorf("redisstore: subscribe to invalidations: %w", err)
	}
	resync()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1024))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				return nil
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if rediskey.IsSubscribed(m) { // remade after a reconnection
					resync()
				}
			case *redis.Message:
				k, err := keystore.ParseKey(m.Payload)
				if err != nil {
					// Not ours: someone else published here. Drop
					// everything rather than guess.
					resync()
					continue
				}
				drop(k)
			}
		}
	}
}
