// Command bareproxy is the benchmark's baseline: a bare
// httputil.ReverseProxy with idemgate's Transport tuning, and nothing else.
//
// With -redis it is the floor of a Redis-backed keyed write instead (issue
// 17: "two round trips are the floor of the design"): around the same
// proxy, a request with an Idempotency-Key makes the two Redis calls any
// such design makes, a claim before the upstream (SET NX) and the answer
// after it (SET XX), each one go-redis round trip, and nothing else: no
// fingerprint, no record encoding, no lease, no log.
//
// With -redis and -store, the two calls are idemgate's own store's
// (keystore/redisstore: Reserve before the upstream, CompleteClaim after,
// the fenced scripts and their record), and still nothing else of
// idemgate: what the store costs, apart from the rest of the proxy.
//
// With -design it is the design floor (design.go): the bare proxy plus the
// work DESIGN.md asks of every request, written plainly (issue 31). With
// -design and -redis, the design floor keeps its claims and answers in
// Redis with the floor's two calls (SET NX, SET XX) instead of in a map:
// the floor of a Redis keyed write that also does DESIGN's work.
package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/idemgate/idemgate/internal/memlimit"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/proxy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18082", "address")
	upstream := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
	redisAddr := flag.String("redis", "", "Redis address: make a keyed request's two Redis calls (the floor of a Redis-backed keyed write)")
	useStore := flag.Bool("store", false, "with -redis: make the two calls through idemgate's Redis store (Reserve, CompleteClaim)")
	designWork := flag.Bool("design", false, "the design floor: add the work DESIGN.md asks of every request, written plainly (design.go); access log to stdout; with -redis its claims and answers are kept in Redis (SET NX, SET XX)")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = pr.In.Host },
		Transport:     proxy.NewTransport(),
		FlushInterval: 0, // as idemgate
		// As idemgate (and ../shared/bench-wrk's bare proxy): without a
		// pool, ReverseProxy allocates a 32 KB copy buffer per request,
		// which cost this floor 40–60 µs of CPU per request more than a
		// pooled one on the 2-core bench machine (issue 31).
		BufferPool: &bufferPool{},
	}
	var h http.Handler = rp
	switch {
	case *designWork:
		// With idemgate's garbage-collector setting, which any such
		// proxy could have too.
		memlimit.KeepHeapFloor(nil, memlimit.DefaultHeapFloor, 0)
		var c claims = newMemClaims()
		if *redisAddr != "" {
			c = &redisClaims{rdb: floorClient(*redisAddr), prefix: "designfloor:"}
		}
		d := designFloor(rp, u, os.Stdout, prometheus.DefaultRegisterer, c)
		go func() {
			for range time.Tick(100 * time.Millisecond) {
				d.flushLog()
			}
		}()
		h = d
	case *redisAddr != "" && *useStore:
		client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{*redisAddr}})
		if err != nil {
			log.Fatal(err)
		}
		s, err := redisstore.New(client, redisstore.Options{KeyPrefix: "floorstore:"})
		if err != nil {
			log.Fatal(err)
		}
		h = storeFloor(rp, s)
	case *redisAddr != "":
		h = floor(rp, floorClient(*redisAddr))
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 1 << 20}
	log.Fatal(srv.ListenAndServe())
}

// floorClient is the floors' one Redis client (-redis, -design -redis).
func floorClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
}

// bufferPool recycles ReverseProxy's 32 KB copy buffers.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if v, ok := b.p.Get().(*[]byte); ok {
		return *v
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }

// keyedFloor wraps rp in a keyed request's two store calls: claim before
// the upstream (an error is answered 503, a key claimed already 409), and
// store with the answer's body after it (read whole, as it must be to be
// stored, then sent on). A request without an Idempotency-Key just goes
// through.
func keyedFloor[C any](rp *httputil.ReverseProxy,
	claim func(ctx context.Context, key string) (c C, ok bool, err error),
	store func(ctx context.Context, c C, res *http.Response, body []byte) error,
) http.Handler {
	type claimCtx struct{}
	rp.ModifyResponse = func(res *http.Response) error {
		c, ok := res.Request.Context().Value(claimCtx{}).(C)
		if !ok {
			return nil
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if err := store(res.Request.Context(), c, res, b); err != nil {
			return err
		}
		res.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			rp.ServeHTTP(w, r)
			return
		}
		c, ok, err := claim(r.Context(), key)
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case !ok:
			http.Error(w, "claimed already", http.StatusConflict)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimCtx{}, c)))
	})
}

// floor makes the two calls as any such design makes them, each one
// go-redis round trip: SET NX, then SET XX with the answer's body.
func floor(rp *httputil.ReverseProxy, rdb *redis.Client) http.Handler {
	const ttl = 24 * time.Hour
	return keyedFloor(rp,
		func(ctx context.Context, key string) (string, bool, error) {
			key = "floor:" + key
			ok, err := rdb.SetNX(ctx, key, "claimed", ttl).Result()
			return key, ok, err
		},
		func(ctx context.Context, key string, _ *http.Response, body []byte) error {
			return rdb.SetArgs(ctx, key, body, redis.SetArgs{Mode: "XX", TTL: ttl}).Err()
		})
}

// storeFloor makes them through idemgate's store: Reserve, then
// CompleteClaim with the answer.
func storeFloor(rp *httputil.ReverseProxy, s *redisstore.Store) http.Handler {
	type claim struct {
		key keystore.Key
		c   keystore.Claim
	}
	return keyedFloor(rp,
		func(ctx context.Context, key string) (claim, bool, error) {
			k := keystore.NewKey("floor", key)
			res, err := s.Reserve(ctx, k, keystore.ReserveOptions{
				Fingerprint: keystore.Fingerprint(k),
				Route:       "floor",
				Lease:       30 * time.Second,
				Retention:   24 * time.Hour,
			})
			return claim{k, res.Claim}, err == nil && res.Response == nil, err
		},
		func(ctx context.Context, c claim, res *http.Response, body []byte) error {
			_, err := s.CompleteClaim(ctx, c.key, c.c, &keystore.Response{Status: res.StatusCode, Header: res.Header, Body: body})
			return err
		})
}
