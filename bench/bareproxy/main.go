// Command bareproxy is the benchmark's baseline: a bare
// httputil.ReverseProxy with idemgate's Transport tuning, and nothing else.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/idemgate/idemgate/proxy"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18082", "address")
	upstream := flag.String("upstream", "http://127.0.0.1:18081", "upstream URL")
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
	srv := &http.Server{Addr: *addr, Handler: rp, ReadHeaderTimeout: time.Minute, IdleTimeout: 5 * time.Minute, MaxHeaderBytes: 1 << 20}
	log.Fatal(srv.ListenAndServe())
}
