package rediskey

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReadTimeout returns client's read timeout, or def when it has none or
// its type does not tell (a Ring).
func ReadTimeout(client redis.UniversalClient, def time.Duration) time.Duration {
	var d time.Duration
	switch c := client.(type) {
	case *redis.Client:
		d = c.Options().ReadTimeout
	case *redis.ClusterClient:
		d = c.Options().ReadTimeout
	}
	if d <= 0 {
		return def
	}
	return d
}

// IsSubscribed reports whether m, a reply a PubSub received, confirms a
// SUBSCRIBE.
func IsSubscribed(m any) bool {
	sub, ok := m.(*redis.Subscription)
	return ok && sub.Kind == "subscribe"
}

// Confirm reads the first reply of ps, subscribed to one channel, within
// timeout, and returns an error unless it confirms the subscription.
// Every subscriber of idemgate's (completion notices, replay-cache
// invalidations, session releases) reads it before it hands ps to
// go-redis's channel, because go-redis ignores a refusal in silence (the
// channel not granted to the ACL user): the subscription then stays
// refused until its connection is made again, and whoever waits for its
// messages waits for a poll instead.
func Confirm(ctx context.Context, ps *redis.PubSub, timeout time.Duration) error {
	m, err := ps.ReceiveTimeout(ctx, timeout)
	if err != nil {
		return err
	}
	if !IsSubscribed(m) {
		return fmt.Errorf("SUBSCRIBE answered with %T, not a confirmation", m)
	}
	return nil
}
