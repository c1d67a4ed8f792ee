// Command bareproxy is the benchmark's baseline: a bare
// httputil.ReverseProxy with idemgate's Transport tuning, and nothing else.
//
// With -redis it is the floor of a Redis-backed keyed write instead (issue
// 17: "two round trips are the floor of the design"): around the same
// proxy, a request with an Idempotency-Key makes the two Redis calls any
// such design makes, a claim before the upstream (SET NX) and the answer
// after it (SET XX), each one go-redis round trip, and nothing else: no
// fingerprint, no record encoding, no lease, no log.
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
	"time"

	"github.com/idemgate/idemgate/proxy"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18082", "address")
	upstream := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
	redisAddr := flag.String("redis", "", "Redis address: make a keyed request's two Redis calls (the floor of a Redis-backed keyed write)")
	flag.Parse()
	u, err := url.Parse(*upstream)
	if err != nil {
		log.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u); pr.Out.Host = pr.In.Host },
		Transport:     proxy.NewTransport(),
		FlushInterval: 0, // as idemgate
	}
	var h http.Handler = rp
	if *redisAddr != "" {
		h = floor(rp, redis.NewClient(&redis.Options{Addr: *redisAddr, PoolSize: 64}))
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: time.Minute, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 1 << 20}
	log.Fatal(srv.ListenAndServe())
}

// floor wraps rp in a keyed request's two Redis round trips: a claim before
// the upstream, the answer's body after it (read whole, as it must be to be
// stored, then sent on).
func floor(rp *httputil.ReverseProxy, rdb *redis.Client) http.Handler {
	const ttl = 24 * time.Hour
	type keyCtx struct{}
	rp.ModifyResponse = func(res *http.Response) error {
		key, _ := res.Request.Context().Value(keyCtx{}).(string)
		if key == "" {
			return nil
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if err := rdb.SetArgs(res.Request.Context(), key, b, redis.SetArgs{Mode: "XX", TTL: ttl}).Err(); err != nil {
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
		key = "floor:" + key
		ok, err := rdb.SetNX(r.Context(), key, "claimed", ttl).Result()
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case !ok:
			http.Error(w, "claimed already", http.StatusConflict)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyCtx{}, key)))
	})
}
