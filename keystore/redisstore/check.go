package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Finding is one thing [Check] found wrong, or could not verify, about
// the Redis servers a store writes to. Findings are warnings: the caller
// logs them and goes on (unkeyed traffic must flow while Redis is down).
type Finding struct {
	// Server is the address of the server it concerns ("" for all).
	Server string
	// Problem is a short machine-readable name: "unreachable",
	// "eviction", "persistence" or "unverifiable".
	Problem string
	// Detail says what was seen and what to do, in one sentence.
	Detail string
}

func (f Finding) String() string {
	if f.Server == "" {
		return f.Problem + ": " + f.Detail
	}
	return f.Server + ": " + f.Problem + ": " + f.Detail
}

// Check asks every master behind c whether it can keep idemgate's records
// safe: it answers, its maxmemory-policy is noeviction (any other policy
// may evict claims and answers, so a write runs twice), and it persists
// (appendonly yes, or at least RDB snapshots; without either a restart
// empties the store). A server that refuses CONFIG GET (managed Redis
// services often do) yields an "unverifiable" finding, not an error.
// Check returns no findings for a healthy set-up.
func Check(ctx context.Context, c redis.UniversalClient) []Finding {
	var (
		mu  sync.Mutex
		out []Finding
	)
	add := func(f Finding) {
		mu.Lock()
		out = append(out, f)
		mu.Unlock()
	}
	check := func(ctx context.Context, sc *redis.Client) error {
		for _, f := range checkServer(ctx, sc) {
			add(f)
		}
		return nil
	}
	var err error
	switch cc := c.(type) {
	case *redis.ClusterClient:
		err = cc.ForEachMaster(ctx, check)
	case *redis.Client:
		err = check(ctx, cc)
	default:
		// A ring or an unknown client: check through the universal
		// interface, without a server address.
		err = checkUniversal(ctx, c, add)
	}
	if err != nil {
		add(Finding{Problem: "unreachable", Detail: fmt.Sprintf("cannot reach Redis (%v): keyed writes get 503 idempotency_unavailable until it answers; unkeyed traffic flows", err)})
	}
	return out
}

func checkServer(ctx context.Context, sc *redis.Client) []Finding {
	addr := sc.Options().Addr
	if err := sc.Ping(ctx).Err(); err != nil {
		return []Finding{{Server: addr, Problem: "unreachable", Detail: fmt.Sprintf("cannot reach Redis (%v): keyed writes get 503 idempotency_unavailable until it answers; unkeyed traffic flows", err)}}
	}
	var out []Finding
	checkConfig(ctx, sc, func(f Finding) {
		f.Server = addr
		out = append(out, f)
	})
	return out
}

func checkUniversal(ctx context.Context, c redis.UniversalClient, add func(Finding)) error {
	if err := c.Ping(ctx).Err(); err != nil {
		return err
	}
	checkConfig(ctx, c, add)
	return nil
}

// configGetter is the part of a go-redis client checkConfig uses.
type configGetter interface {
	ConfigGet(ctx context.Context, parameter string) *redis.MapStringStringCmd
}

func checkConfig(ctx context.Context, c configGetter, add func(Finding)) {
	get := func(name string) (string, error) {
		m, err := c.ConfigGet(ctx, name).Result()
		if err != nil {
			return "", err
		}
		v, ok := m[name]
		if !ok {
			return "", errors.New("not reported")
		}
		return v, nil
	}
	policy, err := get("maxmemory-policy")
	if err != nil {
		add(Finding{Problem: "unverifiable", Detail: fmt.Sprintf("cannot read maxmemory-policy (CONFIG GET: %v); make sure it is noeviction and that the server persists (appendonly yes)", err)})
		return
	}
	if policy != "noeviction" {
		add(Finding{Problem: "eviction", Detail: fmt.Sprintf("maxmemory-policy is %s: Redis may evict claims and stored answers, and a retry of an evicted key runs the write again; set maxmemory-policy noeviction", policy)})
	}
	aof, err := get("appendonly")
	if err != nil {
		add(Finding{Problem: "unverifiable", Detail: fmt.Sprintf("cannot read appendonly (CONFIG GET: %v); make sure the server persists (appendonly yes)", err)})
		return
	}
	if strings.EqualFold(aof, "yes") {
		return
	}
	save, err := get("save")
	switch {
	case err != nil:
		add(Finding{Problem: "unverifiable", Detail: fmt.Sprintf("appendonly is no and save cannot be read (CONFIG GET: %v); set appendonly yes", err)})
	case strings.TrimSpace(save) == "":
		add(Finding{Problem: "persistence", Detail: "appendonly is no and RDB snapshots are off: a restart empties the store, and every retry of an earlier write runs again; set appendonly yes"})
	default:
		add(Finding{Problem: "persistence", Detail: fmt.Sprintf("appendonly is no (RDB snapshots only, save %q): a restart loses the writes since the last snapshot, and their retries run again; set appendonly yes", save)})
	}
}

// Logger adapts go-redis's process-wide logger (redis.SetLogger) to slog,
// so its few messages (pool and dial trouble) land in the JSON log as
// warnings instead of as plain text lines. While Redis is down go-redis
// logs a dial failure for every connection attempt, several a second: with
// Every set, a message is logged at most once per Every, and its next line
// says how many were left out since the one before ("suppressed", and
// "suppressed_for", the time since that line). The count of the last
// window is reported only if the message comes again. Use it as a pointer:
// it is safe for concurrent use.
type Logger struct {
	// L receives the lines; nil drops them.
	L *slog.Logger
	// Every is the least time between two lines of one message (messages
	// are told apart by go-redis's format string, or by their text when
	// the format is only verbs). 0 logs every message.
	Every time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu   sync.Mutex           // protects seen
	seen map[string]*logState // at most maxLogKeys messages tracked
}

// logState is one message's last logged line and what was left out since.
type logState struct {
	last       time.Time
	suppressed int
}

// maxLogKeys bounds the messages tracked; past it, expired ones are
// dropped, and a new message beyond them is logged without a limit.
const maxLogKeys = 64

// Printf implements go-redis's internal logging interface.
func (l *Logger) Printf(ctx context.Context, format string, v ...any) {
	if l.L == nil {
		return
	}
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	if l.Every <= 0 {
		l.L.WarnContext(ctx, msg)
		return
	}
	key := format
	if strings.Trim(format, "%sv \n") == "" { // "%s": the text is the message
		key = msg
	}
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	t := now()
	l.mu.Lock()
	st := l.seen[key]
	if st != nil && t.Sub(st.last) < l.Every {
		st.suppressed++
		l.mu.Unlock()
		return
	}
	var n int
	var since time.Duration
	switch {
	case st != nil:
		n, since = st.suppressed, t.Sub(st.last)
		st.last, st.suppressed = t, 0
	default:
		if l.seen == nil {
			l.seen = map[string]*logState{}
		}
		if len(l.seen) >= maxLogKeys {
			for k, s := range l.seen {
				if t.Sub(s.last) >= l.Every && s.suppressed == 0 {
					delete(l.seen, k)
				}
			}
		}
		if len(l.seen) < maxLogKeys {
			l.seen[key] = &logState{last: t}
		}
	}
	l.mu.Unlock()
	if n > 0 {
		l.L.WarnContext(ctx, msg, "suppressed", n, "suppressed_for", since.Round(time.Millisecond).String())
		return
	}
	l.L.WarnContext(ctx, msg)
}
