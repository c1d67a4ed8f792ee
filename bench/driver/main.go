// Command driver runs idemgate's end-to-end benchmark: it starts the
// upstream, a bare ReverseProxy, nginx and idemgate (memory and Redis
// stores), runs every scenario in interleaved rounds with loadgen, checks
// each run's statuses and the upstream's execution counts, and prints a
// Markdown table of medians, min–max and ratios against the direct upstream
// and the bare proxy from the same run.
//
// It is started by bench/run.sh, which builds the binaries and installs
// nginx when missing. Servers are pinned to CPU 1 and the load generator to
// CPU 0 with taskset when the machine has two or more CPUs.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

type scenario struct {
	name    string
	url     string
	method  string
	body    string
	key     string // none | unique | fixed
	expect  int
	execs   string // all | none | any: what the upstream must have executed
	replays bool   // every answer must be a replay
	base    string // "GET" or "POST": which baselines to compare with
	ids     int    // distinct {id} values in url
	twin    string // for a filled store's scenario: the same scenario on an empty store
	redis   bool   // its process uses Redis: Redis's CPU per request is measured too
}

type run struct {
	RPS        float64          `json:"rps"`
	Requests   int64            `json:"requests"`
	Sent       int64            `json:"sent"` // the warm-up's requests included
	P50        float64          `json:"p50_ms"`
	P99        float64          `json:"p99_ms"`
	P999       float64          `json:"p999_ms"`
	Unexpected int64            `json:"unexpected"`
	Errors     int64            `json:"errors"`
	Replayed   int64            `json:"replayed"`
	Statuses   map[string]int64 `json:"statuses"`
	// CPUPerReq is the CPU time (user + system) the process serving the
	// scenario spent per request sent, in µs; 0 when unknown (nginx, whose
	// work is in a child process).
	CPUPerReq float64 `json:"-"`
	// RedisCPUPerReq is Redis's CPU time per request sent, in µs, for a
	// scenario whose process uses Redis; 0 otherwise.
	RedisCPUPerReq float64 `json:"-"`
}

var (
	bin         = flag.String("bin", "bench/.bin", "directory of the built binaries")
	rounds      = flag.Int("rounds", 3, "interleaved rounds")
	dur         = flag.Duration("d", 5*time.Second, "measured duration of one run")
	conns       = flag.Int("c", 64, "connections")
	rate        = flag.Float64("rate", 2000, "fixed rate for the latency runs (0 skips them)")
	fixedRounds = flag.Int("fixed-rounds", 3, "interleaved rounds of the fixed-rate runs")
	redis       = flag.String("redis", "", "Redis address for the Redis-store scenarios (empty skips them)")
	only        = flag.String("only", "", "comma-separated scenario names to run (default all)")
	workdir     = flag.String("work", "", "scratch directory (default a temp dir)")
	pinCPUs     = flag.Bool("pin", true, "pin servers to CPU 1 and the load generator to CPU 0")
	nginxBin    = flag.String("nginx", "nginx", "nginx binary (empty skips nginx)")
	ports       = flag.Int("ports", 18081, "the first of the 17 loopback ports the servers listen on")
	sequential  = flag.Bool("sequential", false, "one connection, one request after another (issue 31: the latency a sequential client feels): the closed-loop runs with -c 1, reported as p50/p99 with their spread and the additions over the bare proxy; no fixed-rate runs")
	cacheN      = flag.Int("replay-cache", 100000, "store.redis.replay_cache.max_entries of the Redis-store idemgate (0: no replay cache)")
	identity    = flag.Bool("identity", false, "idemgate requires an identity (require_identity: true, the default as deployed) and loadgen sends Authorization: Bearer bench-client, as ../shared/bench-wrk does; default off (anonymous clients)")
	alone       = flag.Bool("alone", false, "each run with the other servers stopped (SIGSTOP, SIGCONT after): only the measured server and the upstream on the servers' core, as ../shared/bench-wrk runs one target at a time")
	jsonlPath   = flag.String("jsonl", "", "append each run as one JSON line to this file (for combining rounds of several invocations)")
	prefillN    = flag.Int("prefill", 0, "records to store before the rounds: a second memory-store idemgate, measured beside the empty one in the same rounds, and the Redis-store idemgate are each sent that many keyed first writes (issue 17: 1000000)")
)

// The servers' addresses: ports -ports+0 to +16 on 127.0.0.1 (set by
// setPorts), so that two runs on one machine need not share them.
var (
	upAddr, bareAddr, nginxAddr, memAddr, redisAddr, floorAddr string
	// designAddr is the design floor: the bare proxy plus the work
	// DESIGN.md asks of every request, written plainly (bench/bareproxy
	// -design).
	designAddr string
	// designRedisAddr is the design floor keeping its claims and answers
	// in Redis with the floor's two calls (bench/bareproxy -design
	// -redis).
	designRedisAddr string
	fullAddr        string // the memory store filled with -prefill records
	// storeFloorAddr is the floor making its two calls through idemgate's
	// Redis store (bench/bareproxy -redis -store).
	storeFloorAddr                  string
	memAdmin, redisAdmin, fullAdmin string
)

// setPorts sets the servers' addresses from -ports.
func setPorts() {
	at := func(off int) string { return fmt.Sprintf("127.0.0.1:%d", *ports+off) }
	upAddr, bareAddr, nginxAddr, memAddr, redisAddr, floorAddr, fullAddr, storeFloorAddr = at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7)
	memAdmin, redisAdmin, fullAdmin = at(13), at(14), at(16)
	designAddr, designRedisAddr = at(8), at(9)
}

const body = `{"items":[{"sku":"tea","qty":2},{"sku":"coffee","qty":1}],"note":"benchmark"}`

func main() { os.Exit(drive()) }

// drive runs the benchmark and returns the exit status, after its deferred
// reports and the servers' shutdown.
func drive() int {
	flag.Parse()
	log.SetFlags(0)
	if *sequential {
		*conns, *rate = 1, 0
	}
	setPorts()
	dir := *workdir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "idemgate-bench-"); err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
	}
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			stop(p)
		}
	}()
	// idemgate's log (the access log included) goes to a file in dir, as
	// a container runtime takes a process's output: written and kept.
	var accessLogs []*os.File
	defer func() {
		for _, f := range accessLogs {
			if st, err := f.Stat(); err == nil {
				log.Printf("access log %s: %d bytes", f.Name(), st.Size())
			}
			f.Close()
		}
	}()
	start := func(name string, args ...string) {
		cmd := server(name, args...)
		cmd.Stderr = os.Stderr
		if strings.HasSuffix(name, "idemgate") || slices.Contains(args, "-design") {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("idemgate-%d.log", len(procs))))
			if err != nil {
				log.Fatal(err)
			}
			accessLogs = append(accessLogs, f)
			cmd.Stdout, cmd.Stderr = f, f
		}
		if err := cmd.Start(); err != nil {
			log.Fatalf("start %s: %v", name, err)
		}
		procs = append(procs, cmd)
		allProcs = procs
	}
	start(filepath.Join(*bin, "upstream"), "-listen", upAddr)
	start(filepath.Join(*bin, "bareproxy"), "-listen", bareAddr, "-upstream", "http://"+upAddr)
	start(filepath.Join(*bin, "bareproxy"), "-listen", designAddr, "-upstream", "http://"+upAddr, "-design")
	designProc := procs[len(procs)-1]
	haveNginx := *nginxBin != ""
	if haveNginx {
		conf := filepath.Join(dir, "nginx.conf")
		os.WriteFile(conf, []byte(nginxConf(dir)), 0o644)
		start(*nginxBin, "-c", conf, "-p", dir, "-g", "daemon off;")
	}
	start(filepath.Join(*bin, "idemgate"), "--config", writeConfig(dir, "mem.yaml", memAddr, memAdmin, "memory"))
	memProc := procs[len(procs)-1]
	var fullProc *exec.Cmd
	if *prefillN > 0 {
		start(filepath.Join(*bin, "idemgate"), "--config", writeConfig(dir, "full.yaml", fullAddr, fullAdmin, "memory"))
		fullProc = procs[len(procs)-1]
		serving[fullAddr] = fullProc
	}
	var redisProc *exec.Cmd
	if *redis != "" {
		var err error
		if redisPID, err = redisProcessID(*redis); err != nil {
			log.Printf("Redis's CPU is not measured: %v", err)
		}
		start(filepath.Join(*bin, "idemgate"), "--config", writeConfig(dir, "redis.yaml", redisAddr, redisAdmin, "redis"))
		redisProc = procs[len(procs)-1]
		// The floor of a Redis keyed write: the bare proxy plus the two
		// Redis round trips and nothing else (bench/bareproxy -redis).
		start(filepath.Join(*bin, "bareproxy"), "-listen", floorAddr, "-upstream", "http://"+upAddr, "-redis", *redis)
		serving[floorAddr] = procs[len(procs)-1]
		// The same with idemgate's store making the two calls: the fenced
		// scripts without the rest of idemgate.
		start(filepath.Join(*bin, "bareproxy"), "-listen", storeFloorAddr, "-upstream", "http://"+upAddr, "-redis", *redis, "-store")
		serving[storeFloorAddr] = procs[len(procs)-1]
		// The design floor with its claims in Redis: the floor of a Redis
		// keyed write that also does DESIGN's per-request work.
		start(filepath.Join(*bin, "bareproxy"), "-listen", designRedisAddr, "-upstream", "http://"+upAddr, "-design", "-redis", *redis)
		serving[designRedisAddr] = procs[len(procs)-1]
	}
	serving[upAddr], serving[bareAddr], serving[memAddr], serving[designAddr] = procs[0], procs[1], memProc, designProc
	if redisProc != nil {
		serving[redisAddr] = redisProc
	}
	for _, a := range []string{upAddr, bareAddr, memAddr, designAddr} {
		waitListening(a)
	}
	if haveNginx {
		waitListening(nginxAddr)
	}
	if *redis != "" {
		waitListening(redisAddr)
		waitListening(floorAddr)
		waitListening(storeFloorAddr)
		waitListening(designRedisAddr)
	}
	if fullProc != nil {
		waitListening(fullAddr)
	}

	get := "/ucp/v1/carts/cart_1"
	scenarios := []scenario{
		{name: "direct GET", url: "http://" + upAddr + get, method: "GET", execs: "any", base: "GET"},
		{name: "bare GET", url: "http://" + bareAddr + get, method: "GET", execs: "any", base: "GET"},
		{name: "nginx GET", url: "http://" + nginxAddr + get, method: "GET", execs: "any", base: "GET"},
		{name: "idemgate pass-through GET", url: "http://" + memAddr + "/other" + get, method: "GET", execs: "any", base: "GET"},
		{name: "design floor GET", url: "http://" + designAddr + "/other" + get, method: "GET", execs: "any", base: "GET"},
		{name: "direct POST", url: "http://" + upAddr + "/ucp/v1/carts", method: "POST", body: body, expect: 201, execs: "all", base: "POST"},
		{name: "bare POST", url: "http://" + bareAddr + "/ucp/v1/carts", method: "POST", body: body, expect: 201, execs: "all", base: "POST"},
		{name: "nginx POST", url: "http://" + nginxAddr + "/ucp/v1/carts", method: "POST", body: body, expect: 201, execs: "all", base: "POST"},
		{name: "idemgate unkeyed POST", url: "http://" + memAddr + "/ucp/v1/carts", method: "POST", body: body, expect: 201, execs: "all", base: "POST"},
		{name: "idemgate keyed first write (memory)", url: "http://" + memAddr + "/ucp/v1/carts", method: "POST", body: body, key: "unique", expect: 201, execs: "all", base: "POST"},
		{name: "design floor keyed write", url: "http://" + designAddr + "/ucp/v1/carts", method: "POST", body: body, key: "unique", expect: 201, execs: "all", base: "POST"},
		{name: "idemgate replay (memory)", url: "http://" + memAddr + "/ucp/v1/carts", method: "POST", body: body, key: "fixed", expect: 201, execs: "none", replays: true, base: "POST"},
		{name: "idemgate session route, keyed (memory, 256 sessions)", url: "http://" + memAddr + "/ucp/v1/sessions/{id}", method: "PUT", body: body, key: "unique", expect: 201, execs: "all", base: "POST", ids: 256},
	}
	if *redis != "" {
		// Beside the memory build's pass-through, in every round: a
		// pass-through must not depend on the store (issue 31).
		i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == "idemgate pass-through GET" })
		scenarios = slices.Insert(scenarios, i+1, scenario{name: "idemgate pass-through GET (Redis)", url: "http://" + redisAddr + "/other" + get, method: "GET", execs: "any", base: "GET"})
		scenarios = append(scenarios,
			scenario{name: "floor keyed write (bare + 2 Redis round trips)", url: "http://" + floorAddr + "/ucp/v1/carts", method: "POST", body: body, key: "unique", expect: 201, execs: "all", base: "POST", redis: true},
			scenario{name: "design floor keyed write (Redis)", url: "http://" + designRedisAddr + "/ucp/v1/carts", method: "POST", body: body, key: "unique", expect: 201, execs: "all", base: "POST", redis: true},
			scenario{name: "floor with idemgate's store (bare + Reserve + CompleteClaim)", url: "http://" + storeFloorAddr + "/ucp/v1/carts", method: "POST", body: body, key: "unique", expect: 201, execs: "all", base: "POST", redis: true},
			scenario{name: "idemgate keyed first write (Redis)", url: "http://" + redisAddr + "/ucp/v1/carts", method: "POST", body: body, key: "unique", expect: 201, execs: "all", base: "POST", redis: true},
			scenario{name: "idemgate replay (Redis)", url: "http://" + redisAddr + "/ucp/v1/carts", method: "POST", body: body, key: "fixed", expect: 201, execs: "none", replays: true, base: "POST", redis: true},
		)
	}
	if fullProc != nil {
		// The same scenarios on the filled memory store, in the same rounds
		// as on the empty one (issue 17: with 1 M records stored, keyed
		// write throughput and fixed-rate pass-through p99 within 15 % of
		// the same run on an empty store). Measured in the same rounds,
		// the two share the machine's drift.
		for _, name := range []string{"idemgate pass-through GET", "idemgate keyed first write (memory)"} {
			i := slices.IndexFunc(scenarios, func(s scenario) bool { return s.name == name })
			f := scenarios[i]
			f.twin, f.name = f.name, fmt.Sprintf("%s [memory store holding %d records]", strings.TrimSuffix(f.name, " (memory)"), *prefillN)
			f.url = strings.Replace(f.url, memAddr, fullAddr, 1)
			scenarios = slices.Insert(scenarios, i+1, f)
		}
	}
	if !haveNginx {
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return strings.HasPrefix(s.name, "nginx") })
	}
	if *only != "" {
		keep := strings.Split(*only, ",")
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return !slices.Contains(keep, s.name) })
	}

	// Only the twins of kept scenarios compare.
	names := map[string]bool{}
	for _, s := range scenarios {
		names[s.name] = true
	}
	for i := range scenarios {
		if !names[scenarios[i].twin] {
			scenarios[i].twin = ""
		}
	}

	if *prefillN > 0 {
		// Stores filled as deployed: a day of records is millions.
		targets := map[string]*exec.Cmd{fullAddr: fullProc}
		if redisProc != nil {
			targets[redisAddr] = redisProc
		}
		for addr, p := range targets {
			if err := prefill("http://"+addr+"/ucp/v1/carts", *prefillN); err != nil {
				log.Fatalf("prefill %s: %v", addr, err)
			}
			log.Printf("prefilled %s with %d records: idemgate RSS %s", addr, *prefillN, rss(p))
		}
	}
	failed := false
	results := interleave(scenarios, *rounds, 0, &failed)
	if *sequential {
		fmt.Printf("\nSequential: one connection, one request after another, %s per run, %d interleaved rounds (median, min–max):\n\n", *dur, *rounds)
		printLatencyRows(scenarios, results)
	} else {
		printTable(scenarios, results)
	}
	var fixed map[string]run
	if *rate > 0 {
		fixed = printLatency(scenarios, &failed)
	}
	if *prefillN > 0 {
		printFilled(scenarios, results, fixed)
	}
	log.Printf("idemgate RSS at the end: memory store %s", rss(memProc))
	if fullProc != nil {
		log.Printf("idemgate RSS at the end: memory store holding %d records %s", *prefillN, rss(fullProc))
	}
	if redisProc != nil {
		log.Printf("idemgate RSS at the end: Redis store %s", rss(redisProc))
	}
	if failed {
		return 1
	}
	return 0
}

// prefill sends n keyed first writes (each its own key) to url from 64
// connections, and checks every answer is a 201 that ran upstream.
func prefill(url string, n int) error {
	start := time.Now()
	before := executions()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	prefix := fmt.Sprintf("prefill-%d-", time.Now().UnixNano())
	var next atomic.Int64
	var failures atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || failures.Load() > 0 {
					return
				}
				req, _ := http.NewRequest("POST", url, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", prefix+strconv.FormatInt(i, 36))
				identify(req)
				res, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 201 || res.Header.Get("Idempotent-Replayed") != "" {
						err = fmt.Errorf("status %d, replayed %q", res.StatusCode, res.Header.Get("Idempotent-Replayed"))
					}
				}
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if i%(max(int64(n)/10, 1)) == 0 {
					log.Printf("prefill %s: %d of %d (%.0f/s)", url, i, n, float64(i)/time.Since(start).Seconds())
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	if ran := executions() - before; ran != int64(n) {
		return fmt.Errorf("the upstream executed %d requests for %d prefill writes", ran, n)
	}
	return nil
}

// stop ends p: SIGTERM first, so that nginx's master ends its workers
// (SIGKILL left them serving the port into the next run), then SIGKILL if
// it is still there after 5 s.
func stop(p *exec.Cmd) {
	p.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		p.Process.Kill()
		<-done
	}
}

// rss returns a process's resident set size, from /proc.
func rss(p *exec.Cmd) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Process.Pid))
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func server(name string, args ...string) *exec.Cmd {
	if *pinCPUs {
		return exec.Command("taskset", append([]string{"-c", "1", name}, args...)...)
	}
	return exec.Command(name, args...)
}

func waitListening(addr string) {
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	log.Fatalf("%s did not start listening within 10s", addr)
}

func executions() int64 {
	res, err := http.Get("http://" + upAddr + "/__stats")
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	var s struct{ Executions int64 }
	json.NewDecoder(res.Body).Decode(&s)
	return s.Executions
}

// runOne runs loadgen once for s (closed loop when fixedRate is 0) and
// checks its answers and the upstream's executions.
func runOne(s scenario, prefix string, fixedRate float64) (run, error) {
	if s.key == "fixed" {
		// The first write of the key; the run then replays it.
		req, _ := http.NewRequest(s.method, s.url, strings.NewReader(s.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", prefix)
		identify(req)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return run{}, err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	before := executions()
	proc := serving[hostOf(s.url)]
	cpuBefore := procCPU(proc)
	redisBefore := pidCPU(redisPID)
	args := []string{"-url", s.url, "-method", s.method, "-c", fmt.Sprint(*conns), "-d", dur.String(),
		"-warmup", "1s", "-key", keyMode(s.key), "-key-prefix", prefix, "-expect", fmt.Sprint(s.expect), "-ids", fmt.Sprint(max(s.ids, 1))}
	if s.body != "" {
		args = append(args, "-body", s.body)
	}
	if *identity {
		args = append(args, "-H", "Authorization: "+bearer)
	}
	if *alone {
		defer pauseOthers(proc)()
	}
	if fixedRate > 0 {
		args = append(args, "-rate", fmt.Sprint(fixedRate), "-c", "256")
	}
	loadgen := filepath.Join(*bin, "loadgen")
	var cmd *exec.Cmd
	if *pinCPUs {
		cmd = exec.Command("taskset", append([]string{"-c", "0", loadgen}, args...)...)
	} else {
		cmd = exec.Command(loadgen, args...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return run{}, fmt.Errorf("loadgen: %v", err)
	}
	var r run
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return run{}, fmt.Errorf("loadgen output %q: %v", out.String(), err)
	}
	if cpu := procCPU(proc) - cpuBefore; cpu > 0 && r.Sent > 0 {
		r.CPUPerReq = float64(cpu.Microseconds()) / float64(r.Sent)
	}
	if cpu := pidCPU(redisPID) - redisBefore; s.redis && redisPID > 0 && r.Sent > 0 {
		r.RedisCPUPerReq = float64(cpu.Microseconds()) / float64(r.Sent)
	}
	delta := executions() - before
	switch {
	case r.Unexpected > 0 || r.Errors > 0:
		return r, fmt.Errorf("%d unexpected statuses %v, %d errors", r.Unexpected, r.Statuses, r.Errors)
	case s.replays && r.Replayed != r.Requests:
		return r, fmt.Errorf("%d of %d answers were replays; want all", r.Replayed, r.Requests)
	case s.execs == "none" && delta != 0:
		return r, fmt.Errorf("the upstream executed %d requests; want none", delta)
	case s.execs == "all" && s.key == "unique" && r.Replayed != 0:
		return r, fmt.Errorf("%d replays in a first-write run", r.Replayed)
	case s.execs == "all" && delta < r.Requests:
		// Warm-up requests run too, so delta ≥ measured requests.
		return r, fmt.Errorf("the upstream executed %d requests for %d answers; want every one", delta, r.Requests)
	}
	return r, nil
}

// bearer is the credential -identity sends, bench-wrk's.
const bearer = "Bearer bench-client"

// identify gives req the client's identity when -identity is set.
func identify(req *http.Request) {
	if *identity {
		req.Header.Set("Authorization", bearer)
	}
}

// allProcs is every server the driver started; the upstream is the first.
var allProcs []*exec.Cmd

// pauseOthers stops (SIGSTOP) every server but keep and the upstream, and
// returns the function that continues them (-alone). nginx's workers are
// its master's children and are not stopped: run -alone without nginx.
func pauseOthers(keep *exec.Cmd) func() {
	var paused []*exec.Cmd
	for i, p := range allProcs {
		if i == 0 || p == keep {
			continue
		}
		if p.Process.Signal(syscall.SIGSTOP) == nil {
			paused = append(paused, p)
		}
	}
	return func() {
		for _, p := range paused {
			p.Process.Signal(syscall.SIGCONT)
		}
	}
}

// serving maps a scenario's host:port to the process that serves it.
var serving = map[string]*exec.Cmd{}

func hostOf(rawURL string) string {
	h, _, _ := strings.Cut(strings.TrimPrefix(rawURL, "http://"), "/")
	return h
}

// procCPU is the user + system CPU time p has used, from /proc/PID/stat
// (utime and stime, fields 14 and 15, in clock ticks of 1/100 s: Linux's
// USER_HZ on every architecture Go supports here); 0 when unknown.
func procCPU(p *exec.Cmd) time.Duration {
	if p == nil || p.Process == nil {
		return 0
	}
	return pidCPU(p.Process.Pid)
}

// redisPID is the Redis server's process id (INFO's process_id), 0 when
// unknown.
var redisPID int

// redisProcessID asks the Redis at addr for its process id.
func redisProcessID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "INFO server\r\n"); err != nil {
		return 0, err
	}
	// A bulk reply: "$<len>\r\n<text>\r\n".
	b := make([]byte, 0, 4096)
	for !bytes.Contains(b, []byte("process_id:")) || !bytes.Contains(b[bytes.Index(b, []byte("process_id:")):], []byte("\r\n")) {
		if len(b) == cap(b) {
			return 0, errors.New("no process_id in INFO server")
		}
		n, err := c.Read(b[len(b):cap(b)])
		if err != nil {
			return 0, err
		}
		b = b[:len(b)+n]
	}
	rest := b[bytes.Index(b, []byte("process_id:"))+len("process_id:"):]
	return strconv.Atoi(string(rest[:bytes.Index(rest, []byte("\r\n"))]))
}

// pidCPU is procCPU for a process id.
func pidCPU(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count from its ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

func keyMode(k string) string {
	if k == "" {
		return "none"
	}
	return k
}

func median(rs []run, f func(run) float64) (med, lo, hi float64) {
	vs := make([]float64, len(rs))
	for i, r := range rs {
		vs[i] = f(r)
	}
	slices.Sort(vs)
	return vs[len(vs)/2], vs[0], vs[len(vs)-1]
}

// interleave runs every scenario once per round, in turn, n rounds (closed
// loop when rate is 0), and returns each scenario's runs; a failed run is
// logged and sets *failed.
func interleave(scenarios []scenario, n int, rate float64, failed *bool) map[string][]run {
	results := map[string][]run{}
	for round := 1; round <= n; round++ {
		for i, s := range scenarios {
			r, err := runOne(s, fmt.Sprintf("r%d-%d-%d", round, i, time.Now().UnixNano()), rate)
			if err != nil {
				log.Printf("round %d (rate %g), %s: FAILED: %v", round, rate, s.name, err)
				*failed = true
				continue
			}
			log.Printf("round %d, %-40s %9.0f req/s  p50 %.2f ms  p99 %.2f ms  CPU %.0f µs/req", round, s.name, r.RPS, r.P50, r.P99, r.CPUPerReq)
			writeJSONL(s, r, rate)
			results[s.name] = append(results[s.name], r)
		}
	}
	return results
}

// writeJSONL appends r to -jsonl's file, one line: the run with its
// scenario, settings and the machine's load average.
func writeJSONL(s scenario, r run, rate float64) {
	if *jsonlPath == "" {
		return
	}
	load, _ := os.ReadFile("/proc/loadavg")
	line, _ := json.Marshal(map[string]any{
		"harness": "bench", "scenario": s.name, "rps": r.RPS, "requests": r.Requests, "p50_ms": r.P50, "p99_ms": r.P99,
		"cpu_us_per_req": r.CPUPerReq, "redis_cpu_us_per_req": r.RedisCPUPerReq, "connections": *conns, "rate": rate,
		"identity": *identity, "alone": *alone, "loadavg": strings.Join(strings.Fields(string(load))[:3], " "),
		"time": time.Now().UTC().Format(time.RFC3339),
	})
	f, err := os.OpenFile(*jsonlPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	f.Write(append(line, '\n'))
}

// medianOf is the median of f over the runs of the scenario named name, 0
// when it has none.
func medianOf(results map[string][]run, name string, f func(run) float64) float64 {
	if rs := results[name]; len(rs) > 0 {
		m, _, _ := median(rs, f)
		return m
	}
	return 0
}

func printTable(scenarios []scenario, results map[string][]run) {
	rps := func(r run) float64 { return r.RPS }
	fmt.Printf("\nClosed loop, %d connections, %s per run, %d interleaved rounds (median, min–max):\n\n", *conns, *dur, *rounds)
	fmt.Println("| scenario | req/s | min–max | × direct | × bare | p50 ms | p99 ms | CPU µs/req | min–max | CPU × bare | Redis CPU µs/req |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	cpu := func(r run) float64 { return r.CPUPerReq }
	for _, s := range scenarios {
		rs := results[s.name]
		if len(rs) == 0 {
			fmt.Printf("| %s | failed | | | | | | | | | |\n", s.name)
			continue
		}
		m, lo, hi := median(rs, rps)
		p50, _, _ := median(rs, func(r run) float64 { return r.P50 })
		p99, _, _ := median(rs, func(r run) float64 { return r.P99 })
		d, b := medianOf(results, "direct "+s.base, rps), medianOf(results, "bare "+s.base, rps)
		c, clo, chi := median(rs, cpu)
		cpuCols := " | | " // three empty cells
		if c > 0 {
			cpuCols = fmt.Sprintf("%.0f | %.0f–%.0f | %.2f", c, clo, chi, ratio(c, medianOf(results, "bare "+s.base, cpu)))
		}
		fmt.Printf("| %s | %.0f | %.0f–%.0f | %.2f | %.2f | %.2f | %.2f | %s | %s |\n", s.name, m, lo, hi, ratio(m, d), ratio(m, b), p50, p99, cpuCols, redisCPU(rs))
	}
}

// redisCPU is the median of Redis's CPU per request over rs, "" when not
// measured.
func redisCPU(rs []run) string {
	if m, _, _ := median(rs, func(r run) float64 { return r.RedisCPUPerReq }); m > 0 {
		return fmt.Sprintf("%.0f", m)
	}
	return ""
}

func printLatency(scenarios []scenario, failed *bool) map[string]run {
	var runs []scenario
	for _, s := range scenarios {
		if !strings.HasPrefix(s.name, "direct") && !strings.HasPrefix(s.name, "nginx") {
			runs = append(runs, s)
		}
	}
	// Interleaved rounds, as for the closed loop: one run's p99 moves by
	// 2× with the machine's load, a median of several much less.
	all := interleave(runs, *fixedRounds, *rate, failed)
	fmt.Printf("\nFixed rate %.0f req/s, %s per run, %d interleaved rounds (median, min–max), latency from each request's due time (coordinated omission corrected):\n\n", *rate, *dur, *fixedRounds)
	return printLatencyRows(runs, all)
}

// printLatencyRows prints the latency table of runs (medians of all's runs,
// with their spread, and the additions over the bare proxy's) and returns
// the medians by scenario.
func printLatencyRows(runs []scenario, all map[string][]run) map[string]run {
	fmt.Println("| scenario | p50 ms | p50 min–max | p99 ms | p99 min–max | p99.9 ms | + p50 over bare | + p99 over bare | CPU µs/req | Redis CPU µs/req |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	out := map[string]run{}
	for _, s := range runs {
		rs := all[s.name]
		if len(rs) == 0 {
			fmt.Printf("| %s | failed | | | | | | | | |\n", s.name)
			continue
		}
		var m run
		m.Requests = 1
		var lo50, hi50, lo, hi float64
		m.P50, lo50, hi50 = median(rs, func(r run) float64 { return r.P50 })
		m.P99, lo, hi = median(rs, func(r run) float64 { return r.P99 })
		m.P999, _, _ = median(rs, func(r run) float64 { return r.P999 })
		m.CPUPerReq, _, _ = median(rs, func(r run) float64 { return r.CPUPerReq })
		out[s.name] = m
		b := out["bare "+s.base]
		fmt.Printf("| %s | %.3f | %.3f–%.3f | %.3f | %.3f–%.3f | %.3f | %+.3f | %+.3f | %.0f | %s |\n", s.name, m.P50, lo50, hi50, m.P99, lo, hi, m.P999, m.P50-b.P50, m.P99-b.P99, m.CPUPerReq, redisCPU(rs))
	}
	return out
}

// printFilled compares each scenario on the filled memory store with its
// twin on the empty one, from the same rounds: closed-loop throughput
// (medians) and fixed-rate p99 (medians).
func printFilled(scenarios []scenario, results map[string][]run, fixed map[string]run) {
	fmt.Printf("\nFilled ÷ empty memory store, the same rounds (issue 17 target: keyed writes' req/s and the pass-through's fixed-rate p99 within 15 %%):\n\n")
	fmt.Println("| scenario | req/s empty | req/s filled | filled ÷ empty | fixed-rate p99 empty ms | filled ms | filled ÷ empty |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	rps := func(r run) float64 { return r.RPS }
	for _, s := range scenarios {
		if s.twin == "" || len(results[s.name]) == 0 || len(results[s.twin]) == 0 {
			continue
		}
		e, _, _ := median(results[s.twin], rps)
		f, _, _ := median(results[s.name], rps)
		ef, ff := fixed[s.twin], fixed[s.name]
		p99 := "| | |"
		if ef.Requests > 0 && ff.Requests > 0 {
			p99 = fmt.Sprintf("%.3f | %.3f | %.2f", ef.P99, ff.P99, ratio(ff.P99, ef.P99))
		}
		fmt.Printf("| %s | %.0f | %.0f | %.2f | %s |\n", s.twin, e, f, ratio(f, e), p99)
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func writeConfig(dir, name, listen, admin, backend string) string {
	cfg := fmt.Sprintf(`listen: %q
admin_listen: %q
upstream:
  url: "http://%s"
  timeout: 30s
edge_limit:
  rate: 0
store:
  backend: %s
  memory:
    max_entries: 50000000
    max_bytes: 17179869184
  redis:
    addrs: [%q]
    key_prefix: "bench-%d:"
    replay_cache:
      max_entries: %d
idempotency:
  require_identity: %t   # -identity: loadgen's clients send bench-wrk's bearer token
routes:
  - name: create_cart
    method: POST
    path: /ucp/v1/carts
    idempotent: true
  - name: get_cart
    method: GET
    path: /ucp/v1/carts/{id}
  - name: update_session
    method: PUT
    path: /ucp/v1/sessions/{id}
    idempotent: true
    session: id
`, listen, admin, upAddr, backend, *redis, time.Now().UnixNano(), *cacheN, *identity)
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		log.Fatal(err)
	}
	return p
}

func nginxConf(dir string) string {
	return fmt.Sprintf(`worker_processes 1;
error_log %[1]s/nginx-error.log warn;
pid %[1]s/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream api { server %[2]s; keepalive 256; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://api;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
    }
  }
}
`, dir, upAddr, nginxAddr)
}
