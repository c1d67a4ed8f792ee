// Command hostile drives issue 15's hostile load against a running idemgate
// and reports its peak memory: 60 concurrent keyed 1 MiB "[0,0,...]" bodies,
// 40 concurrent keyed requests with ~1 MB of small headers, then both at
// once. While each phase runs it scrapes idemgate's /metrics every 20 ms
// for the Go heap (go_memstats_heap_inuse_bytes, which the Prometheus Go
// collector takes from runtime/metrics) and reads /proc/PID/status for the
// resident set (VmRSS, sampled; VmHWM, the kernel's lifetime peak), and
// the live heap the last collection found (go_gc_heap_live_bytes).
//
//	hostile -url http://127.0.0.1:18096/ucp/v1/carts -metrics http://127.0.0.1:18097/metrics -pid 1234
//
// With -clients N the requests come from N client addresses (127.0.0.1 to
// 127.0.0.N, round robin), each with its own max_buffered_bytes_per_client
// share, so that together they can fill the whole max_buffered_bytes
// budget; the target must then be on 127.0.0.1.
//
// The route must be keyed (idempotent: true). Every request carries a fresh
// Idempotency-Key. Nothing is retried; every run is bounded by -timeout.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	target      = flag.String("url", "", "keyed route URL of the idemgate under test (required)")
	metricsURL  = flag.String("metrics", "", "idemgate's /metrics URL (admin listener)")
	pid         = flag.Int("pid", 0, "idemgate's process ID, for /proc/PID/status (0: RSS not reported)")
	bodies      = flag.Int("bodies", 60, "concurrent keyed requests with a big body")
	bodySize    = flag.Int("body-size", 1<<20, "bytes of each [0,0,...] body")
	headerReqs  = flag.Int("headers", 40, "concurrent keyed requests with big headers")
	headerBytes = flag.Int("header-bytes", 1_000_000, "bytes of small headers per request")
	timeout     = flag.Duration("timeout", 2*time.Minute, "bound on each phase")
	clients     = flag.Int("clients", 1, "client addresses (127.0.0.1 to 127.0.0.N) the requests come from, round robin")
	slow        = flag.Int("slow", 0, "then, sockets that send half a request head and hold it (a phase of their own)")
)

func main() {
	flag.Parse()
	if *target == "" {
		flag.Usage()
		os.Exit(2)
	}
	body := zeros(*bodySize)
	hdr := smallHeaders(*headerBytes)
	if *clients < 1 || *clients > 254 {
		log.Fatal("-clients must be from 1 to 254")
	}
	fmt.Printf("target %s, %d × %d-byte [0,0,...] bodies, %d × %d bytes of headers, from %d client addresses\n", *target, *bodies, len(body), *headerReqs, *headerBytes, *clients)
	fmt.Printf("GOMEMLIMIT in force: %s\n", human(scrape()["go_gc_gomemlimit_bytes"]))
	fmt.Printf("\n| phase | answers | peak Go heap in use | peak heap live | peak RSS (sampled) | VmHWM after |\n|---|---|---|---|---|---|\n")
	for _, ph := range []struct {
		name            string
		nBodies, nHeads int
	}{
		{"bodies", *bodies, 0},
		{"headers", 0, *headerReqs},
		{"both", *bodies, *headerReqs},
	} {
		run(ph.name, ph.nBodies, ph.nHeads, body, hdr)
	}
	if *slow > 0 {
		slowHeads(*slow)
	}
}

// sampler samples the heap and RSS every 20 ms until stop is called, which
// returns the peaks.
func sampler() (stop func() (inuse, live, rss float64)) {
	var peakInuse, peakLive, peakRSS float64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			m := scrape()
			peakInuse = max(peakInuse, m["go_memstats_heap_inuse_bytes"])
			peakLive = max(peakLive, m["go_gc_heap_live_bytes"])
			if rss := procStatus("VmRSS"); rss > 0 {
				peakRSS = max(peakRSS, rss)
			} else {
				peakRSS = max(peakRSS, m["process_resident_memory_bytes"])
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() (float64, float64, float64) {
		close(done)
		<-sampled
		return peakInuse, peakLive, peakRSS
	}
}

// slowHeads opens n connections that each send half a request head and
// hold it for two seconds after the last one opened, then closes them.
func slowHeads(n int) {
	stop := sampler()
	host := strings.TrimPrefix(strings.TrimPrefix(*target, "http://"), "https://")
	host, _, _ = strings.Cut(host, "/")
	var conns []net.Conn
	failed := 0
	for i := range n {
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i%*clients))}}
		c, err := d.Dial("tcp", host)
		if err != nil {
			failed++
			continue
		}
		fmt.Fprintf(c, "POST /slow HTTP/1.1\r\nHost: x\r\nX-Slow: %d\r\n", i)
		conns = append(conns, c)
	}
	time.Sleep(2 * time.Second)
	inuse, live, rss := stop()
	for _, c := range conns {
		c.Close()
	}
	fmt.Printf("| %d slow heads | open %d, dial errors %d | %s | %s | %s | %s |\n", n, len(conns), failed, human(inuse), human(live), human(rss), human(procStatus("VmHWM")))
}

// run sends nBodies body requests and nHeads header requests at once and
// prints the phase's row.
func run(name string, nBodies, nHeads int, body []byte, hdr http.Header) {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	stop := sampler()
	var mu sync.Mutex
	answers := map[string]int{}
	count := func(s string) {
		mu.Lock()
		answers[s]++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	cs := make([]*http.Client, *clients)
	for i := range cs {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))}}
		cs[i] = &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	}
	for i := range nBodies {
		client := cs[i%len(cs)]
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, *target, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key())
			count("body " + do(client, req))
		})
	}
	for i := range nHeads {
		client := cs[i%len(cs)]
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, *target, strings.NewReader(`{"a":1}`))
			req.Header = hdr.Clone()
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key())
			count("headers " + do(client, req))
		})
	}
	wg.Wait()
	peakInuse, peakLive, peakRSS := stop()
	var parts []string
	for k, v := range answers {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, v))
	}
	sort.Strings(parts)
	fmt.Printf("| %s | %s | %s | %s | %s | %s |\n", name, strings.Join(parts, ", "), human(peakInuse), human(peakLive), human(peakRSS), human(procStatus("VmHWM")))
}

// do sends req and returns its status, or what went wrong.
func do(c *http.Client, req *http.Request) string {
	resp, err := c.Do(req)
	if err != nil {
		if req.Context().Err() != nil {
			return "timeout"
		}
		return "conn error"
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return strconv.Itoa(resp.StatusCode)
}

// zeros returns an n-byte JSON array of zeros (n >= 3), padded with a
// trailing space when n is even.
func zeros(n int) []byte {
	b := make([]byte, 0, n)
	b = append(b, '[', '0')
	for len(b)+3 <= n {
		b = append(b, ',', '0')
	}
	b = append(b, ']')
	for len(b) < n {
		b = append(b, ' ')
	}
	return b
}

func smallHeaders(n int) http.Header {
	h := http.Header{}
	size := 0
	for i := 0; size < n; i++ {
		k := fmt.Sprintf("X-H%06d", i)
		h[k] = []string{"v"}
		size += len(k) + 5 // "K: v\r\n"
	}
	return h
}

func key() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// scrape returns the unlabelled samples of /metrics by name.
func scrape() map[string]float64 {
	out := map[string]float64{}
	if *metricsURL == "" {
		return out
	}
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(*metricsURL)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// procStatus returns a "kB" field of /proc/PID/status in bytes, or 0.
func procStatus(field string) float64 {
	if *pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", *pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

func human(v float64) string {
	switch {
	case v <= 0:
		return "n/a"
	case v >= 1e18:
		return "none"
	default:
		return fmt.Sprintf("%.0f MiB", v/(1<<20))
	}
}

func init() { log.SetFlags(0) }
