package redisstore

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/rediskey"
	"github.com/idemgate/idemgate/keystore"
)

// Notices is the Redis [keystore.Notices]: completion notices go over one
// pub/sub channel, "<key_prefix>notices", as the record's hashed key in hex
// (never a client's raw key). Each process holds one subscription, opened
// with the first watch and fanned out to its watchers by a [keystore.Hub];
// a notice lost while the subscription reconnects only delays waiters until
// their poll.
type Notices struct {
	client  redis.UniversalClient
	channel string
	log     *slog.Logger
	hub     keystore.Hub

	mu     sync.Mutex
	sub    *redis.PubSub
	done   chan struct{}
	closed bool
}

// NewNotices returns the notices of the stores under keyPrefix ("":
// [DefaultKeyPrefix]) on client. Close it to drop its subscription; it does
// not close client.
func NewNotices(client redis.UniversalClient, keyPrefix string, log *slog.Logger) *Notices {
	if keyPrefix == "" {
		keyPrefix = DefaultKeyPrefix
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notices{client: client, channel: keyPrefix + "notices", log: log}
}

// Channel returns the pub/sub channel name.
func (n *Notices) Channel() string { return n.channel }

// Publish implements [keystore.Notices]: this process's watchers are woken
// at once, the other processes' through Redis.
func (n *Notices) Publish(ctx context.Context, key keystore.Key) error {
	n.hub.Notify(key)
	return n.client.Publish(ctx, n.channel, key.String()).Err()
}

// Notify wakes this process's watchers of key only: the other processes'
// learn of it from a notice the store published with its write
// ([keystore.FoldedNotice]).
func (n *Notices) Notify(key keystore.Key) { n.hub.Notify(key) }

// Watch implements [keystore.Notices].
func (n *Notices) Watch(key keystore.Key) (<-chan struct{}, func()) {
	n.subscribe()
	return n.hub.Watch(key)
}

// subscribe opens the process's one subscription, once.
func (n *Notices) subscribe() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sub != nil || n.closed {
		return
	}
	sub := n.client.Subscribe(context.Background(), n.channel)
	n.sub = sub
	n.done = make(chan struct{})
	go func() {
		defer close(n.done)
		// The first reply confirms the subscription or refuses it (the
		// channel not granted to the ACL user: rediskey.Confirm), and
		// every waiter would wait for its poll. Say so once, unless the
		// notices were closed meanwhile. The subscription is still kept:
		// a confirmation that comes late counts, and a refusal lasts until
		// the connection is made again (a restart, after the ACL is fixed).
		if err := rediskey.Confirm(context.Background(), sub, readTimeout(n.client)); err != nil {
			n.mu.Lock()
			closed := n.closed
			n.mu.Unlock()
			if closed || errors.Is(err, redis.ErrClosed) {
				return
			}
			n.log.Warn("completion notices: the subscription was refused or not confirmed; waiters on in_progress: wait routes fall back to their poll",
				"channel", n.channel, "error", err)
		}
		ch := sub.Channel() // go-redis reconnects and resubscribes on its own
		for msg := range ch {
			b, err := hex.DecodeString(msg.Payload)
			var k keystore.Key
			if err != nil || len(b) != len(k) {
				n.log.Warn("ignoring a malformed completion notice", "channel", msg.Channel)
				continue
			}
			copy(k[:], b)
			n.hub.Notify(k)
		}
	}()
}

// Close drops the subscription and waits for its reader to stop.
func (n *Notices) Close() error {
	n.mu.Lock()
	n.closed = true
	sub, done := n.sub, n.done
	n.mu.Unlock()
	if sub == nil {
		return nil
	}
	err := sub.Close()
	<-done
	return err
}
