// Command upstream is the benchmark's upstream: a small HTTP API that
// answers at once and counts what it executed, so a benchmark run can check
// that every write due to run ran and no replay did.
//
//	GET  /__stats   {"executions": N, "by_method": {...}}
//	POST /__reset   zero the counts
//	anything else   POST/PUT/PATCH/DELETE → 201 with a ~100-byte JSON body
//	                (an execution); other methods → 200
package main

import (
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18081", "address")
	flag.Parse()
	var execs, gets atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /__stats", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{"executions": execs.Load(), "reads": gets.Load()})
	})
	mux.HandleFunc("POST /__reset", func(w http.ResponseWriter, r *http.Request) {
		execs.Store(0)
		gets.Store(0)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			n := gets.Add(1)
			w.Write([]byte(`{"id":"cart_1","items":[{"sku":"tea","qty":2}],"read":` + strconv.FormatInt(n, 10) + `}`))
		default:
			n := execs.Add(1)
			w.WriteHeader(http.StatusCreated)
			w.Write([]byte(`{"id":"cart_` + strconv.FormatInt(n, 10) + `","items":[{"sku":"tea","qty":2}],"status":"open","execution":` + strconv.FormatInt(n, 10) + `}`))
		}
	})
	srv := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: time.Minute, IdleTimeout: 5 * time.Minute}
	log.Fatal(srv.ListenAndServe())
}
