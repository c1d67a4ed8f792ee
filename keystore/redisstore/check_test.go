package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

func TestCheck(t *testing.T) {
	r := startOwnRedis(t)
	admin := r.client(t, time.Second)
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		config map[string]string
		user   string
		want   []string // problems, in order
	}{
		{"safe", map[string]string{"appendonly": "yes", "maxmemory-policy": "noeviction"}, "", nil},
		{"no persistence", map[string]string{"appendonly": "no", "save": "", "maxmemory-policy": "noeviction"}, "", []string{"persistence"}},
		{"snapshots only", map[string]string{"appendonly": "no", "save": "3600 1", "maxmemory-policy": "noeviction"}, "", []string{"persistence"}},
		{"evicting", map[string]string{"appendonly": "yes", "maxmemory-policy": "allkeys-lru"}, "", []string{"eviction"}},
		{"evicting, no persistence", map[string]string{"appendonly": "no", "save": "", "maxmemory-policy": "volatile-ttl"}, "", []string{"eviction", "persistence"}},
		{"config refused", map[string]string{"appendonly": "yes", "maxmemory-policy": "noeviction"}, "noconfig", []string{"unverifiable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.config {
				if err := admin.ConfigSet(ctx, k, v).Err(); err != nil {
					t.Fatalf("CONFIG SET %s %q: %v", k, v, err)
				}
			}
			o := ClientOptions{Addrs: []string{r.Addr}, Timeout: time.Second}
			if tc.user != "" {
				o.Username, o.Password = tc.user, "pw"
			}
			c, err := NewClient(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var got []string
			for _, f := range Check(ctx, c) {
				got = append(got, f.Problem)
				if f.Server != r.Addr || f.Detail == "" {
					t.Errorf("finding %+v: want server %s and a detail", f, r.Addr)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("problems %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCheckUnreachable(t *testing.T) {
	c, err := NewClient(ClientOptions{Addrs: []string{"127.0.0.1:1"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f := Check(context.Background(), c)
	if len(f) != 1 || f[0].Problem != "unreachable" {
		t.Fatalf("findings %v, want one unreachable", f)
	}
}

func TestCheckCluster(t *testing.T) {
	o := clientOptions(t, redistest.Cluster) // skips without the test cluster
	c, err := NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The test cluster runs without persistence: each master says so.
	seen := map[string]bool{}
	for _, f := range Check(context.Background(), c) {
		if f.Problem != "persistence" {
			t.Errorf("unexpected finding %v", f)
		}
		seen[f.Server] = true
	}
	if len(seen) != 3 {
		t.Errorf("findings from %d masters, want 3", len(seen))
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	l := Logger{L: slog.New(slog.NewJSONHandler(&buf, nil))}
	l.Printf(context.Background(), "redis: %s:%d: connection pool: %v\n", "pool.go", 770, "timeout")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
	}
	if line["level"] != "WARN" || line["msg"] != "redis: pool.go:770: connection pool: timeout" {
		t.Errorf("line %v", line)
	}
	(&Logger{}).Printf(context.Background(), "dropped") // no logger: no panic
}

// TestLoggerRateLimit: with Every, go-redis's dial failure (logged for each
// attempt while Redis is down, about 4 a second) makes one line per Every,
// the next one counting what was left out; another message has its own
// limit; a message whose format is only verbs is told apart by its text.
func TestLoggerRateLimit(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Unix(1_700_000_000, 0)
	l := &Logger{L: slog.New(slog.NewJSONHandler(&buf, nil)), Every: 10 * time.Second, Now: func() time.Time { return now }}
	ctx := context.Background()
	const dial = "redis: connection pool: failed to dial after %d attempts: %v"
	// 30 s of Redis down: a dial failure every 250 ms (121 in all, t = 0..30 s).
	for i := 0; i <= 120; i++ {
		l.Printf(ctx, dial, 5, "dial tcp 127.0.0.1:6379: connect: connection refused")
		if i%40 == 0 {
			l.Printf(ctx, "%s", "handoff "+strconv.Itoa(i/40)) // 4 distinct "%s" messages
		}
		now = now.Add(250 * time.Millisecond)
	}
	type line struct {
		Msg           string `json:"msg"`
		Suppressed    int    `json:"suppressed"`
		SuppressedFor string `json:"suppressed_for"`
	}
	var dials, others []line
	for _, b := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		var ln line
		if err := json.Unmarshal(b, &ln); err != nil {
			t.Fatalf("not JSON: %q", b)
		}
		if strings.HasPrefix(ln.Msg, "redis: connection pool") {
			dials = append(dials, ln)
		} else {
			others = append(others, ln)
		}
	}
	// Lines at 0 s, 10 s, 20 s and 30 s; each later one counts the 39 left
	// out in the 10 s before it.
	if len(dials) != 4 {
		t.Fatalf("%d dial failure lines for 121 failures over 30 s; want 4", len(dials))
	}
	for i, d := range dials {
		want := 39
		if i == 0 {
			want = 0
		}
		if d.Suppressed != want || (i > 0 && d.SuppressedFor != "10s") {
			t.Errorf("line %d: suppressed %d over %q; want %d over 10s", i, d.Suppressed, d.SuppressedFor, want)
		}
	}
	if len(others) != 4 {
		t.Errorf("%d lines of 4 distinct %%s messages; want 4", len(others))
	}

	// Many goroutines at one instant: one line, then one counting the rest.
	buf.Reset()
	now = now.Add(time.Hour)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				l.Printf(ctx, dial, 5, "refused")
			}
		})
	}
	wg.Wait()
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 1 {
		t.Errorf("400 concurrent failures made %d lines; want 1", n)
	}
	now = now.Add(10 * time.Second)
	l.Printf(ctx, dial, 5, "refused")
	if !bytes.Contains(buf.Bytes(), []byte(`"suppressed":399`)) {
		t.Errorf("the line after the burst does not count 399 left out:\n%s", buf.String())
	}

	buf.Reset()
	all := &Logger{L: slog.New(slog.NewJSONHandler(&buf, nil))} // Every 0: every line
	for range 5 {
		all.Printf(ctx, dial, 5, "refused")
	}
	if n := bytes.Count(buf.Bytes(), []byte("\n")); n != 5 {
		t.Errorf("Every 0 logged %d of 5 lines", n)
	}
}
