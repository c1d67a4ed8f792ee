// Package redisstorage is a certmagic.Storage on a go-redis client, so that
// idemgate replicas sharing a Redis share their ACME certificates, account
// and locks: one replica obtains or renews each certificate and every
// replica serves it, and any replica can answer another's HTTP-01
// challenge.
//
// # Layout
//
// Every key lives under KeyPrefix + "{certmagic}:" (one hash tag: one Redis
// Cluster slot, so that each operation is a single atomic script; the data
// is a few KiB per certificate):
//
//	<p>{certmagic}:index            sorted set of every stored certmagic key (score 0)
//	<p>{certmagic}:v:<sha256(key)>  hash {k: key, v: value, m: modified (µs, Redis TIME), s: size}
//	<p>{certmagic}:lock:<sha256(n)> string: the holder's random token, with a TTL
//
// Certmagic keys (which contain host names from TLS handshakes) are hashed
// before they become Redis key names; the index holds them as members,
// queried by lexicographic range for List, Exists and Stat on
// "directories".
//
// # Locks
//
// Lock sets the lock key to a random token with SET NX semantics and a TTL
// ([Options.LockTTL]), refreshes the TTL every third of it while held
// (compare-and-expire), and Unlock deletes it only if it still holds the
// token (compare-and-delete). A holder that dies stops refreshing, so its
// lock lapses after at most LockTTL. A waiting Lock polls every
// [Options.LockPoll] until the lock is free or its context ends.
package redisstorage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/rediskey"
)

// Defaults of [Options].
const (
	DefaultKeyPrefix = rediskey.DefaultPrefix
	DefaultLockTTL   = 10 * time.Second
	DefaultLockPoll  = 250 * time.Millisecond
)

// Errors of the lock methods, checked with errors.Is.
var (
	// ErrNotLocked is returned by Unlock for a name this Storage does not
	// hold.
	ErrNotLocked = errors.New("redisstorage: lock not held by this storage")
	// ErrLockLost is returned by Unlock when the lock had lapsed (its TTL
	// ran out without refresh) or was taken over by another holder.
	ErrLockLost = errors.New("redisstorage: lock lost")
	// ErrClosed is returned by Lock and TryLock after Close.
	ErrClosed = errors.New("redisstorage: closed")
)

// Options configure [New]. The zero value is usable.
type Options struct {
	// KeyPrefix prefixes every key. Default [DefaultKeyPrefix]; idemgate
	// passes store.redis.key_prefix.
	KeyPrefix string
	// LockTTL is how long a lock outlives a holder that stopped refreshing
	// it (crashed, or cut off from Redis). Default [DefaultLockTTL];
	// at least 30ms.
	LockTTL time.Duration
	// LockPoll is how often a blocked Lock tries again. Default
	// [DefaultLockPoll].
	LockPoll time.Duration
	// Logger receives lock refresh failures. Default: discard.
	Logger *slog.Logger
}

// Storage implements certmagic.Storage and certmagic.TryLocker on Redis.
// It is safe for concurrent use. It does not own the client: Close releases
// the locks it holds, and the caller closes the client afterwards.
type Storage struct {
	rdb        redis.UniversalClient
	prefix     string // KeyPrefix + "{certmagic}:"
	ttl, poll  time.Duration
	log        *slog.Logger
	mu         sync.Mutex // protects held, closed
	held       map[string]*heldLock
	closed     bool
	releaseAll sync.Once
}

var (
	_ certmagic.Storage   = (*Storage)(nil)
	_ certmagic.TryLocker = (*Storage)(nil)
)

// heldLock is one lock this Storage holds, and its refresher goroutine.
type heldLock struct {
	key, token string
	stop, done chan struct{}
}

// New returns a Storage on rdb (any topology: the keys share one Cluster
// slot).
func New(rdb redis.UniversalClient, opts Options) (*Storage, error) {
	if err := rediskey.Check("redisstorage", rdb, &opts.KeyPrefix); err != nil {
		return nil, err
	}
	if opts.LockTTL == 0 {
		opts.LockTTL = DefaultLockTTL
	}
	if opts.LockTTL < 30*time.Millisecond {
		return nil, fmt.Errorf("redisstorage: lock TTL %v: want at least 30ms", opts.LockTTL)
	}
	if opts.LockPoll <= 0 {
		opts.LockPoll = DefaultLockPoll
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Storage{
		rdb:    rdb,
		prefix: opts.KeyPrefix + rediskey.TLSTag,
		ttl:    opts.LockTTL,
		poll:   opts.LockPoll,
		log:    opts.Logger,
		held:   map[string]*heldLock{},
	}, nil
}

func (s *Storage) indexKey() string { return s.prefix + "index" }

func (s *Storage) valueKey(key string) string { return s.prefix + "v:" + hash(key) }

func (s *Storage) lockKey(name string) string { return s.prefix + "lock:" + hash(name) }

func hash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// clean trims the slashes a key should not have.
func clean(key string) string { return strings.Trim(key, "/") }

func notExist(op, key string) error {
	return &fs.PathError{Op: op, Path: key, Err: fs.ErrNotExist}
}

// Store puts value at key, overwriting any value there.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	key = clean(key)
	if key == "" {
		return errors.New("redisstorage: empty key")
	}
	if err := storeScript.Run(ctx, s.rdb, []string{s.indexKey(), s.valueKey(key)}, key, value).Err(); err != nil {
		return fmt.Errorf("redisstorage: store %s: %w", key, err)
	}
	return nil
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	key = clean(key)
	v, err := s.rdb.HGet(ctx, s.valueKey(key), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, notExist("load", key)
	}
	if err != nil {
		return nil, fmt.Errorf("redisstorage: load %s: %w", key, err)
	}
	return v, nil
}

// Delete deletes key and, when key is a directory, every key under it. A
// missing key is not an error.
func (s *Storage) Delete(ctx context.Context, key string) error {
	key = clean(key)
	members, err := s.under(ctx, key, 0)
	if err != nil {
		return fmt.Errorf("redisstorage: delete %s: %w", key, err)
	}
	if key != "" {
		members = append(members, key)
	}
	const chunk = 256 // bounds each script's size
	for len(members) > 0 {
		n := min(chunk, len(members))
		batch := members[:n]
		members = members[n:]
		keys := make([]string, 0, n+1)
		keys = append(keys, s.indexKey())
		args := make([]any, 0, n)
		for _, m := range batch {
			keys = append(keys, s.valueKey(m))
			args = append(args, m)
		}
		if err := deleteScript.Run(ctx, s.rdb, keys, args...).Err(); err != nil {
			return fmt.Errorf("redisstorage: delete %s: %w", key, err)
		}
	}
	return nil
}

// Exists reports whether key is a stored value or a directory holding
// one; false also when Redis cannot be asked.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	key = clean(key)
	if key != "" {
		n, err := s.rdb.Exists(ctx, s.valueKey(key)).Result()
		if err != nil {
			return false
		}
		if n == 1 {
			return true
		}
	}
	m, err := s.under(ctx, key, 1)
	return err == nil && len(m) > 0
}

// List returns the keys under path: its direct children (values and
// directories) or, with recursive, every value and directory below it,
// sorted. It returns an error wrapping fs.ErrNotExist when nothing is
// under path and path is not a value (as certmagic's FileStorage does).
func (s *Storage) List(ctx context.Context, path string, recursive bool) ([]string, error) {
	path = clean(path)
	members, err := s.under(ctx, path, 0)
	if err != nil {
		return nil, fmt.Errorf("redisstorage: list %s: %w", path, err)
	}
	if len(members) == 0 {
		if path != "" {
			n, err := s.rdb.Exists(ctx, s.valueKey(path)).Result()
			if err != nil {
				return nil, fmt.Errorf("redisstorage: list %s: %w", path, err)
			}
			if n == 1 {
				return nil, nil
			}
		}
		return nil, notExist("list", path)
	}
	base := path
	if base != "" {
		base += "/"
	}
	seen := map[string]struct{}{}
	var out []string
	add := func(k string) {
		if _, ok := seen[k]; !ok {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	for _, m := range members {
		rest := m[len(base):]
		if !recursive {
			first, _, _ := strings.Cut(rest, "/")
			add(base + first)
			continue
		}
		for i := 0; i < len(rest); i++ {
			if rest[i] == '/' {
				add(base + rest[:i])
			}
		}
		add(m)
	}
	slices.Sort(out)
	return out, nil
}

// Stat describes key: a value (IsTerminal, with its size and modification
// time by Redis's clock) or a directory; an error wrapping fs.ErrNotExist
// when it is neither.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	key = clean(key)
	vals, err := s.rdb.HMGet(ctx, s.valueKey(key), "m", "s").Result()
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("redisstorage: stat %s: %w", key, err)
	}
	if m, ok := vals[0].(string); ok {
		us, err1 := strconv.ParseInt(m, 10, 64)
		size, err2 := strconv.ParseInt(fmt.Sprint(vals[1]), 10, 64)
		if err1 != nil || err2 != nil {
			return certmagic.KeyInfo{}, fmt.Errorf("redisstorage: stat %s: corrupt metadata %q %v", key, m, vals[1])
		}
		return certmagic.KeyInfo{Key: key, Modified: time.UnixMicro(us), Size: size, IsTerminal: true}, nil
	}
	members, err := s.under(ctx, key, 1)
	if err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("redisstorage: stat %s: %w", key, err)
	}
	if len(members) == 0 {
		return certmagic.KeyInfo{}, notExist("stat", key)
	}
	return certmagic.KeyInfo{Key: key}, nil
}

// under returns the indexed keys below dir ("" is the root), at most limit
// of them when limit > 0. "dir/" up to, not including, "dir0" is exactly
// the keys that start with "dir/" ('0' follows '/').
func (s *Storage) under(ctx context.Context, dir string, limit int64) ([]string, error) {
	by := &redis.ZRangeBy{Min: "-", Max: "+"}
	if dir != "" {
		by = &redis.ZRangeBy{Min: "[" + dir + "/", Max: "(" + dir + "0"}
	}
	if limit > 0 {
		by.Count = limit
	}
	return s.rdb.ZRangeByLex(ctx, s.indexKey(), by).Result()
}

// String names the storage in certmagic's logs.
func (s *Storage) String() string { return "redis:" + s.prefix }
