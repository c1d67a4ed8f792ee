package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore"
)

// EpochOptions configure an [EpochWatcher]. Zero fields take the defaults.
type EpochOptions struct {
	// Interval is the time between two checks. Default 1 s (DESIGN.md,
	// Store loss).
	Interval time.Duration
	// Timeout bounds one check. Default: Interval.
	Timeout time.Duration
	// Now is the clock that dates resets and checks. Default time.Now.
	Now func() time.Time
	// OnReset, when set, is called from the watcher's goroutine for every
	// reset seen, e.g. to log an error.
	OnReset func(Reset)
}

// Reset describes one store reset: a marker that vanished (or that another
// replica wrote anew after it vanished).
type Reset struct {
	// Marker is the marker's Redis key (one per master).
	Marker string
	// At is when the watcher saw it, by [EpochOptions.Now].
	At time.Time
	// Previous and Current are the epochs before and after.
	Previous, Current string
}

// EpochWatcher watches the store's epoch markers (DESIGN.md, Store loss):
// one key per master (per shard of a Ring) that the watcher writes once and
// never expires. When a marker it saw before has vanished, or holds another
// epoch, the master lost its data (a restart without persistence, a
// failover to an empty replica, FLUSHALL): the watcher counts a reset,
// reports it to OnReset and writes a new epoch. A marker first seen absent
// (a new deployment, a new master) is written without counting.
//
// It implements [keystore.EpochReporter]. Make it with [Store.WatchEpoch];
// Close stops its goroutine.
type EpochWatcher struct {
	s    *Store
	opts EpochOptions

	mu     sync.Mutex        // protects seen and status
	seen   map[string]string // marker → the epoch last seen
	status keystore.EpochStatus

	cancel context.CancelFunc // stops the goroutine
	done   chan struct{}      // closed when it has ended
	once   sync.Once
}

var _ keystore.EpochReporter = (*EpochWatcher)(nil)

// WatchEpoch starts an EpochWatcher on s's Redis. It checks at once, then
// every Interval, until Close.
func (s *Store) WatchEpoch(opts EpochOptions) *EpochWatcher {
	w := newEpochWatcher(s, opts)
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.loop(ctx)
	return w
}

// newEpochWatcher returns a watcher whose goroutine is not started.
func newEpochWatcher(s *Store, opts EpochOptions) *EpochWatcher {
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = opts.Interval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &EpochWatcher{
		s:    s,
		opts: opts,
		seen: map[string]string{},
		done: make(chan struct{}),
	}
	return w
}

// EpochStatus implements [keystore.EpochReporter].
func (w *EpochWatcher) EpochStatus() keystore.EpochStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Close stops the watcher (a check under way is cancelled) and waits for
// its goroutine. It is idempotent.
func (w *EpochWatcher) Close() error {
	w.once.Do(func() {
		w.cancel()
		<-w.done
	})
	return nil
}

func (w *EpochWatcher) loop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, w.opts.Timeout)
		resets, _ := w.check(cctx) // the error is kept in the status
		ccancel()
		for _, r := range resets {
			if w.opts.OnReset != nil {
				w.opts.OnReset(r)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check checks every marker once and returns the resets it saw.
func (w *EpochWatcher) check(ctx context.Context) ([]Reset, error) {
	markers, err := w.markers(ctx)
	var resets []Reset
	if err == nil {
		for _, m := range markers {
			var r *Reset
			r, err = w.checkMarker(ctx, m)
			if err != nil {
				break
			}
			if r != nil {
				resets = append(resets, *r)
			}
		}
	}
	if err != nil {
		err = fmt.Errorf("redisstore: epoch check: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range resets {
		w.status.Resets++
		w.status.LastReset = r.At
	}
	w.status.Err = err
	if err == nil {
		w.status.Checked = w.opts.Now()
	}
	return resets, err
}

// marker is one epoch marker and the client that reaches it.
type marker struct {
	key string
	c   redis.Cmdable
}

// checkMarker reads m, writes a new epoch if it is absent, and returns the
// reset it shows, if any.
func (w *EpochWatcher) checkMarker(ctx context.Context, m marker) (*Reset, error) {
	cur, err := m.c.Get(ctx, m.key).Result()
	if errors.Is(err, redis.Nil) {
		epoch := newEpoch(w.opts.Now())
		ok, err := m.c.SetNX(ctx, m.key, epoch, 0).Result()
		if err != nil {
			return nil, err
		}
		cur = epoch
		if !ok { // another replica wrote one first
			if cur, err = m.c.Get(ctx, m.key).Result(); err != nil {
				return nil, err
			}
		}
	} else if err != nil {
		return nil, err
	}
	w.mu.Lock()
	prev, known := w.seen[m.key]
	w.seen[m.key] = cur
	w.mu.Unlock()
	if !known || prev == cur {
		return nil, nil
	}
	return &Reset{Marker: m.key, At: w.opts.Now(), Previous: prev, Current: cur}, nil
}

func newEpoch(now time.Time) string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:]) + ":" + strconv.FormatInt(now.UnixMilli(), 10)
}

// markers returns the store's epoch markers: one key for a standalone or
// Sentinel master, one per master of a Cluster (a key whose hash slot that
// master serves), one per shard of a Ring.
func (w *EpochWatcher) markers(ctx context.Context) ([]marker, error) {
	base := w.s.prefix + "epoch"
	switch c := w.s.client.(type) {
	case *redis.ClusterClient:
		slots, err := c.ClusterSlots(ctx).Result()
		if err != nil {
			return nil, err
		}
		return clusterMarkers(base, slots, c)
	case *redis.Ring:
		var mu sync.Mutex
		var out []marker
		err := c.ForEachShard(ctx, func(ctx context.Context, sc *redis.Client) error {
			mu.Lock()
			out = append(out, marker{key: base, c: sc})
			mu.Unlock()
			return nil
		})
		return out, err
	case redis.Cmdable:
		return []marker{{key: base, c: c}}, nil
	}
	return nil, fmt.Errorf("unsupported client type %T", w.s.client)
}

// clusterMarkers returns one marker per master in slots: base + ":{tag}",
// the first tag "0", "1", … whose hash slot the master serves, so that the
// key lives on it, and stays the same while the master's slots do.
func clusterMarkers(base string, slots []redis.ClusterSlot, c redis.Cmdable) ([]marker, error) {
	type span struct{ start, end int }
	owned := map[string][]span{}
	var masters []string
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		id := s.Nodes[0].ID
		if id == "" {
			id = s.Nodes[0].Addr
		}
		if _, ok := owned[id]; !ok {
			masters = append(masters, id)
		}
		owned[id] = append(owned[id], span{s.Start, s.End})
	}
	slices.Sort(masters)
	out := make([]marker, 0, len(masters))
	for _, id := range masters {
		found := false
		for i := range 1 << 20 {
			tag := strconv.Itoa(i)
			slot := hashSlot(tag)
			if slices.ContainsFunc(owned[id], func(s span) bool { return s.start <= slot && slot <= s.end }) {
				out = append(out, marker{key: base + ":{" + tag + "}", c: c})
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no epoch marker key for master %s", id)
		}
	}
	return out, nil
}

// hashSlot is Redis Cluster's slot of a key without braces (or of a hash
// tag): CRC16-CCITT (XMODEM) modulo 16384.
func hashSlot(s string) int {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}
