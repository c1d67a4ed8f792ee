// Command loadgen drives HTTP load for idemgate's benchmarks and prints one
// JSON line of results.
//
// Closed loop (-rate 0): -c connections each send the next request as soon
// as the last answered; throughput is the result. Fixed rate (-rate R):
// request i is due at start + i/R and its latency is measured from that due
// time, not from when it was sent, so a stalled server is charged for the
// requests it delayed (coordinated omission corrected, as wrk2 does).
//
// Every answer's status is checked against -expect; a run with unexpected
// statuses reports them, so a fast stream of 429s or errors is never mistaken
// for speed.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Requests   int64            `json:"requests"`
	Sent       int64            `json:"sent"` // answered requests, the warm-up's included
	Seconds    float64          `json:"seconds"`
	RPS        float64          `json:"rps"`
	P50        float64          `json:"p50_ms"`
	P99        float64          `json:"p99_ms"`
	P999       float64          `json:"p999_ms"`
	Max        float64          `json:"max_ms"`
	Unexpected int64            `json:"unexpected"`
	Errors     int64            `json:"errors"`
	Statuses   map[string]int64 `json:"statuses"`
	Replayed   int64            `json:"replayed"`
}

func main() {
	url := flag.String("url", "", "target URL")
	method := flag.String("method", "GET", "method")
	body := flag.String("body", "", "request body")
	conns := flag.Int("c", 64, "connections (closed loop) or workers (fixed rate)")
	dur := flag.Duration("d", 5*time.Second, "measured duration")
	warm := flag.Duration("warmup", time.Second, "unmeasured warm-up")
	rate := flag.Float64("rate", 0, "requests per second; 0 = closed loop")
	keyMode := flag.String("key", "none", "Idempotency-Key: none | unique | fixed")
	keyPrefix := flag.String("key-prefix", "k", "prefix of generated keys (unique per run)")
	expect := flag.Int("expect", 0, "expected status (0: any 2xx)")
	ids := flag.Int("ids", 1, "the number of distinct values that replace {id} in -url, in turn")
	var headers multiFlag
	flag.Var(&headers, "H", "header 'Name: value' (repeatable)")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -url is required")
		os.Exit(2)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        *conns * 2,
		MaxIdleConnsPerHost: *conns * 2,
		MaxConnsPerHost:     *conns,
		DisableCompression:  true,
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	g := &gen{client: client, url: *url, method: *method, body: *body, key: *keyMode, prefix: *keyPrefix, expect: *expect, headers: headers, ids: max(*ids, 1)}
	var warmed int64
	if *warm > 0 {
		warmed = g.run(*conns, *warm, *rate, false).Requests
	}
	r := g.run(*conns, *dur, *rate, true)
	r.Sent = warmed + r.Requests
	json.NewEncoder(os.Stdout).Encode(r)
	if r.Requests == 0 {
		os.Exit(1)
	}
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type gen struct {
	client                 *http.Client
	url, method, body, key string
	prefix                 string
	expect                 int
	headers                []string
	ids                    int
	seq, idSeq             atomic.Int64
}

func (g *gen) request() *http.Request {
	var rd io.Reader
	if g.body != "" {
		rd = strings.NewReader(g.body)
	}
	url := g.url
	if strings.Contains(url, "{id}") {
		url = strings.Replace(url, "{id}", "s"+strconv.FormatInt(g.idSeq.Add(1)%int64(g.ids), 10), 1)
	}
	req, _ := http.NewRequest(g.method, url, rd)
	if g.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range g.headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	switch g.key {
	case "unique":
		req.Header.Set("Idempotency-Key", g.prefix+"-"+strconv.FormatInt(g.seq.Add(1), 36))
	case "fixed":
		req.Header.Set("Idempotency-Key", g.prefix)
	}
	return req
}

func (g *gen) run(conns int, d time.Duration, rate float64, record bool) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, 1<<16)
	statuses := map[string]int64{}
	var unexpected, errs, replayed, n atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			localStatus := map[string]int64{}
			for ctx.Err() == nil {
				due := time.Now()
				if rate > 0 {
					i := next.Add(1) - 1
					due = start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
					if due.After(start.Add(d)) {
						break
					}
					if w := time.Until(due); w > 0 {
						t := time.NewTimer(w)
						select {
						case <-ctx.Done():
							t.Stop()
							continue
						case <-t.C:
						}
					}
				}
				res, err := g.client.Do(g.request())
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				l := time.Since(due)
				n.Add(1)
				local = append(local, l)
				localStatus[strconv.Itoa(res.StatusCode)]++
				if (g.expect != 0 && res.StatusCode != g.expect) || (g.expect == 0 && res.StatusCode/100 != 2) {
					unexpected.Add(1)
				}
				if res.Header.Get("Idempotent-Replayed") == "true" {
					replayed.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, local...)
			for k, v := range localStatus {
				statuses[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if !record {
		return result{Requests: n.Load()}
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		i := min(len(lat)-1, int(p*float64(len(lat))))
		return float64(lat[i].Microseconds()) / 1000
	}
	return result{
		Requests: n.Load(), Seconds: elapsed, RPS: float64(n.Load()) / elapsed,
		P50: pct(0.50), P99: pct(0.99), P999: pct(0.999), Max: pct(1),
		Unexpected: unexpected.Load(), Errors: errs.Load(), Statuses: statuses, Replayed: replayed.Load(),
	}
}
