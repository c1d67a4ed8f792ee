package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

func TestCheck(t *testing.T) {
	r := startOwnRedis(t, 10)
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
	Logger{}.Printf(context.Background(), "dropped") // no logger: no panic
}
