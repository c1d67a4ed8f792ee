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
	"github.com/redis/go-redis/v9"
)

// The floor makes a keyed request's two Redis calls: a claim that a second
// request with the key finds, and the answer, stored whole and sent whole.
func TestFloorClaimsAndStores(t *testing.T) {
	var ran atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, ran.Add(1))
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Addr(t)})
	defer rdb.Close()
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	srv := httptest.NewServer(floor(rp, rdb))
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
	if got, err := rdb.Get(t.Context(), "floor:"+key).Result(); err != nil || got != `{"run":1}` {
		t.Errorf("stored %q (%v), want the answer", got, err)
	}
	if code, _ := post(key); code != http.StatusConflict {
		t.Errorf("same key again = %d, want 409", code)
	}
	if code, body := post(""); code != 201 || body != `{"run":2}` {
		t.Errorf("keyless = %d %s", code, body)
	}
	rdb.Del(t.Context(), "floor:"+key)
}
