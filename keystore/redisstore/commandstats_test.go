package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
)

// BenchmarkCompleteClaimRedisCPU is what one CompleteClaim of a 4.5 KB
// JSON answer (keystore/compressed's corpus; and of ten of it, 45 KB)
// costs Redis, from INFO
// commandstats: redis-µs/op is the usec of the calls' own commands
// (FCALL, or EVALSHA and EVAL where functions are refused, and the SET of
// the answer's scratch key when it is moved) per CompleteClaim; the commands a script calls are inside its
// time (and counted apart too: set-µs/op is the script's own SET in the
// classic way). server-user-µs/op and server-sys-µs/op are the server's
// whole CPU (INFO cpu) per CompleteClaim, its network reads and writes
// included: on a shared VM the system time swings with the machine's load
// (context switches, interrupts), the user time much less. It runs on a
// redis-server of its own (or IDEMGATE_BENCH_REDIS_ADDR's, which nothing
// else may use meanwhile), so no other test's commands are counted; the
// Reserves are made before the stats are reset. "classic" is the answer
// in complete_claim.lua's arguments, as before issue 31.
//
//	go test -run XXX -bench CompleteClaimRedisCPU -benchtime 3000x ./keystore/redisstore/
func BenchmarkCompleteClaimRedisCPU(b *testing.B) {
	addr := os.Getenv("IDEMGATE_BENCH_REDIS_ADDR") // a quiet server of one's own, to watch with perf
	if addr == "" {
		addr = redistest.StartOwn(b).Addr
	}
	c, err := NewClient(ClientOptions{Addrs: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	body, err := os.ReadFile("../compressed/testdata/corpus/ucp_checkout_session.json")
	if err != nil {
		b.Fatal(err)
	}
	// The corpus answer, and ten of it in a JSON array (45 KB).
	big := append(append([]byte("["), bytes.Repeat(append(body, ','), 9)...), append(body, ']')...)
	for _, bc := range []struct {
		name   string
		format RecordFormat
		move   bool
		body   []byte
	}{
		{"compact-moved", FormatCompact, true, body},
		{"compact-classic", FormatCompact, false, body},
		{"hash", FormatHash, false, body},
		{"45KB/compact-moved", FormatCompact, true, big},
		{"45KB/compact-classic", FormatCompact, false, big},
	} {
		resp := &keystore.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: bc.body}
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			s := newStoreOpts(b, c, Options{KeyPrefix: "bench:", RecordFormat: bc.format})
			keys := make([]keystore.Key, b.N)
			claims := make([]keystore.Claim, b.N)
			base := fmt.Sprint(time.Now().UnixNano())
			for i := range keys {
				keys[i] = keystore.NewKey("bench", base, strconv.Itoa(i))
				o := reserveOpts("a")
				o.ClaimID = keystore.NewClaimID()
				res, err := s.Reserve(ctx, keys[i], o)
				if err != nil {
					b.Fatal(err)
				}
				claims[i] = res.Claim
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			user0, sys0 := serverCPU(b, c)
			b.ResetTimer()
			for i := range keys {
				how, moved, err := s.completeClaim(ctx, keys[i], claims[i], resp, newOp(), s.lua(), bc.move)
				if err != nil || how != keystore.Completed || moved != bc.move {
					b.Fatalf("completeClaim = %v, moved %v, %v; want Completed, moved %v", how, moved, err, bc.move)
				}
			}
			b.StopTimer()
			user, sys := serverCPU(b, c)
			b.ReportMetric((user-user0)/float64(b.N), "server-user-µs/op")
			b.ReportMetric((sys-sys0)/float64(b.N), "server-sys-µs/op")
			stats, err := c.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			us := commandUsec(b, stats)
			own := us["fcall"] + us["evalsha"] + us["eval"]
			if bc.move {
				own += us["set"]
			}
			b.ReportMetric(own/float64(b.N), "redis-µs/op")
			for _, name := range []string{"fcall", "evalsha", "set"} {
				b.ReportMetric(us[name]/float64(b.N), name+"-µs/op")
			}
			if testing.Verbose() {
				for name, v := range us {
					b.Logf("%s: %.2f µs/op", name, v/float64(b.N))
				}
			}
		})
	}
}

// commandStats parses INFO commandstats into each command's fields
// (calls, usec, failed_calls, ...; subcommands as "function|load"),
// leaving out the INFO and CONFIG calls of the benchmark or test itself.
func commandStats(tb testing.TB, stats string) map[string]map[string]float64 {
	tb.Helper()
	out := map[string]map[string]float64{}
	for _, line := range strings.Split(stats, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		fields := map[string]float64{}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("commandstats %q: %v", line, err)
			}
			fields[k] = f
		}
		out[name] = fields
	}
	return out
}

// commandUsec is each command's total µs in INFO commandstats (see
// commandStats).
func commandUsec(tb testing.TB, stats string) map[string]float64 {
	tb.Helper()
	out := map[string]float64{}
	for name, fields := range commandStats(tb, stats) {
		out[name] = fields["usec"]
	}
	return out
}

// serverCPU is the redis-server's CPU time so far (INFO cpu, main thread
// and the rest), user and system, in µs.
func serverCPU(b testing.TB, c redis.UniversalClient) (user, sys float64) {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_user" && name != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("INFO cpu %q: %v", line, err)
		}
		if name == "used_cpu_user" {
			user = f * 1e6
		} else {
			sys = f * 1e6
		}
	}
	return user, sys
}
