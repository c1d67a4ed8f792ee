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

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/proxy"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18082", "address")
	upstream := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
	redisAddr := flag.String("redis", "", "Redis address: make a keyed request's two Redis calls (the floor of a Redis-backed keyed write)")
	useStore := flag.Bool("store", false, "with -redis: make the two calls through idemgate's Redis store (Reserve, CompleteClaim)")
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
	switch {
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

// storeFloor is floor with idemgate's store making the two calls: a claim
// (Reserve) before the upstream, the answer (CompleteClaim) after it.
func storeFloor(rp *httputil.ReverseProxy, s *redisstore.Store) http.Handler {
	type claimCtx struct{}
	type claim struct {
		key keystore.Key
		c   keystore.Claim
	}
	rp.ModifyResponse = func(res *http.Response) error {
		c, ok := res.Request.Context().Value(claimCtx{}).(claim)
		if !ok {
			return nil
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if _, err := s.CompleteClaim(res.Request.Context(), c.key, c.c, &keystore.Response{Status: res.StatusCode, Header: res.Header, Body: b}); err != nil {
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
		k := keystore.NewKey("floor", key)
		res, err := s.Reserve(r.Context(), k, keystore.ReserveOptions{
			Fingerprint: keystore.Fingerprint(k),
			Route:       "floor",
			Lease:       30 * time.Second,
			Retention:   24 * time.Hour,
		})
		switch {
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		case res.Response != nil:
			http.Error(w, "claimed already", http.StatusConflict)
			return
		}
		rp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimCtx{}, claim{k, res.Claim})))
	})
}
