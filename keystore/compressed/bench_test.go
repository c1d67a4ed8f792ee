package compressed

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// settings are the two values of store.compression.
var settings = []struct {
	name string
	o    Options
}{{"none", Options{}}, {"zstd", on}}

// BenchmarkCorpus is the CPU of compressing each corpus answer (a first
// write's extra work) and of opening it (a replay's), and the share of
// its body the frame takes.
func BenchmarkCorpus(b *testing.B) {
	o := on.normalize()
	for _, a := range corpus(b) {
		resp := jsonAnswer(a.body)
		stored := compress(resp, o)
		if !stored.Compressed {
			b.Fatalf("%s: not compressed", a.name)
		}
		b.Run("compress/"+a.name, func(b *testing.B) {
			b.SetBytes(int64(len(a.body)))
			b.ReportAllocs()
			cpu := storetest.ProcessCPU()
			for b.Loop() {
				compress(resp, o)
			}
			storetest.ReportCPU(b, cpu)
			b.ReportMetric(100*float64(len(stored.Body))/float64(len(a.body)), "%-of-body")
		})
		b.Run("open/"+a.name, func(b *testing.B) {
			b.SetBytes(int64(len(a.body)))
			b.ReportAllocs()
			cpu := storetest.ProcessCPU()
			for b.Loop() {
				if _, err := open(stored, DefaultMaxBodyBytes, nil, 0); err != nil {
					b.Fatal(err)
				}
			}
			storetest.ReportCPU(b, cpu)
		})
	}
}

// BenchmarkMemoryStore is what the corpus costs the memory store per
// record, as it accounts it (store.memory.max_bytes) and as Go's heap
// does, with each setting.
func BenchmarkMemoryStore(b *testing.B) {
	const perAnswer = 2000
	answers := corpus(b)
	ctx := context.Background()
	for _, set := range settings {
		b.Run(set.name, func(b *testing.B) {
			var accounted, heap float64
			for b.Loop() {
				m := memstore.New(memstore.Options{})
				s := mustNew(b, m, set.o)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := range perAnswer {
					for _, a := range answers {
						k := keystore.NewKey(a.name, strconv.Itoa(i))
						res, err := s.Reserve(ctx, k, reserveOpts())
						if err != nil {
							b.Fatal(err)
						}
						if err := s.Complete(ctx, k, res.Token, jsonAnswer(a.body)); err != nil {
							b.Fatal(err)
						}
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				n := float64(perAnswer * len(answers))
				accounted = float64(m.Bytes()) / n
				heap = float64(after.HeapInuse-before.HeapInuse) / n
				runtime.KeepAlive(m)
				m.Close()
			}
			b.ReportMetric(accounted, "accounted-B/record")
			b.ReportMetric(heap, "heap-B/record")
		})
	}
}

// BenchmarkReplay is a replay of a corpus answer from the memory store
// (the Reserve that finds it completed, and opening it), many at once.
func BenchmarkReplay(b *testing.B) {
	answers := corpus(b)
	for _, set := range settings {
		b.Run(set.name, func(b *testing.B) {
			m := memstore.New(memstore.Options{})
			b.Cleanup(func() { m.Close() })
			s := mustNew(b, m, set.o)
			keys := make([]keystore.Key, len(answers))
			for i, a := range answers {
				keys[i] = keystore.NewKey(a.name)
				complete(b, s, keys[i], jsonAnswer(a.body))
			}
			var next atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			cpu := storetest.ProcessCPU()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					k := keys[next.Add(1)%uint64(len(keys))]
					res, err := s.Reserve(ctx, k, reserveOpts())
					if err != nil || res.Response == nil {
						b.Errorf("replay = %v", err)
						return
					}
				}
			})
			storetest.ReportCPU(b, cpu)
		})
	}
}

// BenchmarkFirstWrite is a first write of a corpus answer into the memory
// store: the claim and its completion, many at once.
func BenchmarkFirstWrite(b *testing.B) {
	answers := corpus(b)
	for _, set := range settings {
		b.Run(set.name, func(b *testing.B) {
			m := memstore.New(memstore.Options{MaxEntries: 1 << 30, MaxBytes: 1 << 40})
			b.Cleanup(func() { m.Close() })
			s := mustNew(b, m, set.o)
			var seq atomic.Uint64
			b.ReportAllocs()
			b.ResetTimer()
			cpu := storetest.ProcessCPU()
			defer func() { storetest.ReportCPU(b, cpu) }()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					n := seq.Add(1)
					a := answers[n%uint64(len(answers))]
					k := keystore.NewKey("first", strconv.FormatUint(n, 10))
					res, err := s.Reserve(ctx, k, reserveOpts())
					if err == nil {
						err = s.Complete(ctx, k, res.Token, jsonAnswer(a.body))
					}
					if err != nil {
						b.Errorf("first write = %v", err)
						return
					}
				}
			})
		})
	}
}

// BenchmarkRedis is the corpus in a real Redis (IDEMGATE_TEST_REDIS_ADDR),
// compact records: MEMORY USAGE per record with each setting, and a
// replay's time (one round trip, no replay cache).
func BenchmarkRedis(b *testing.B) {
	answers := corpus(b)
	c := newRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(b)})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	for _, set := range settings {
		prefix := redistest.Prefix(b)
		r, err := redisstore.New(c, redisstore.Options{KeyPrefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { r.Close() })
		s := mustNew(b, r, set.o)
		keys := make([]keystore.Key, len(answers))
		for i, a := range answers {
			keys[i] = keystore.NewKey(a.name, prefix)
			complete(b, s, keys[i], jsonAnswer(a.body))
		}
		b.Run("memory_usage/"+set.name, func(b *testing.B) {
			var total int64
			for b.Loop() {
				total = 0
				iter := rdb.Scan(ctx, 0, prefix+"{*", 100).Iterator()
				n := 0
				for iter.Next(ctx) {
					total += rdb.MemoryUsage(ctx, iter.Val()).Val()
					n++
				}
				if err := iter.Err(); err != nil || n != len(answers) {
					b.Fatalf("%d records, %v; want %d", n, err, len(answers))
				}
			}
			b.ReportMetric(float64(total)/float64(len(answers)), "redis-B/record")
			for i, a := range answers {
				b.ReportMetric(float64(rdb.MemoryUsage(ctx, recordKey(b, rdb, prefix, keys[i])).Val()), a.name+"-B")
			}
		})
		b.Run("replay/"+set.name, func(b *testing.B) {
			var next atomic.Uint64
			b.ReportAllocs()
			cpu := storetest.ProcessCPU()
			defer func() { storetest.ReportCPU(b, cpu) }()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					k := keys[next.Add(1)%uint64(len(keys))]
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					res, err := s.Reserve(ctx, k, reserveOpts())
					cancel()
					if err != nil || res.Response == nil {
						b.Errorf("replay = %v", err)
						return
					}
				}
			})
		})
	}
}

// recordKey is the Redis key of k's record under prefix: the one key
// whose name holds k's hex.
func recordKey(b *testing.B, rdb *redis.Client, prefix string, k keystore.Key) string {
	keys, err := rdb.Keys(context.Background(), prefix+"*"+k.String()+"*").Result()
	if err != nil || len(keys) != 1 {
		b.Fatalf("keys of %s: %v, %v; want one", k, keys, err)
	}
	return keys[0]
}
