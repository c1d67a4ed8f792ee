package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/redis/go-redis/v9"
)

// Each floor makes a keyed request's two Redis calls: a claim that a second
// request with the key finds, and the answer, stored whole and sent whole.
func TestFloorClaimsAndStores(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Options{KeyPrefix: "floorstore-test:"})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, tc := range []struct {
		name   string
		floor  func(*httputil.ReverseProxy) http.Handler
		stored func(key string) (string, error)
	}{
		{
			name:  "SET NX and SET XX",
			floor: func(rp *httputil.ReverseProxy) http.Handler { return floor(rp, rdb) },
			stored: func(key string) (string, error) {
				defer rdb.Del(t.Context(), "floor:"+key)
				return rdb.Get(t.Context(), "floor:"+key).Result()
			},
		},
		{
			name:  "idemgate's store",
			floor: func(rp *httputil.ReverseProxy) http.Handler { return storeFloor(rp, store) },
			stored: func(key string) (string, error) {
				rec, err := store.Get(t.Context(), keystore.NewKey("floor", key))
				if err != nil || rec.State != keystore.StateCompleted {
					return "", fmt.Errorf("record %+v, %v; want completed", rec, err)
				}
				return string(rec.Response.Body), nil
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ran atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"run":%d}`, ran.Add(1))
			}))
			defer up.Close()
			u, _ := url.Parse(up.URL)
			rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
			srv := httptest.NewServer(tc.floor(rp))
			defer srv.Close()

			key := fmt.Sprintf("floor-test-%d", time.Now().UnixNano())
			post := func(key string) (int, string) {
				req, _ := http.NewRequest("POST", srv.URL+"/carts", strings.NewReader(`{}`))
				if key != "" {
					req.Header.Set("Idempotency-Key", key)
				}
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				return res.StatusCode, string(b)
			}
			if code, body := post(key); code != 201 || body != `{"run":1}` {
				t.Fatalf("first = %d %s", code, body)
			}
			if code, _ := post(key); code != http.StatusConflict {
				t.Errorf("same key again = %d, want 409", code)
			}
			if code, body := post(""); code != 201 || body != `{"run":2}` {
				t.Errorf("keyless = %d %s", code, body)
			}
			if got, err := tc.stored(key); err != nil || got != `{"run":1}` {
				t.Errorf("stored %q (%v), want the answer", got, err)
			}
		})
	}
}
