package app

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// redisMonitor lists the commands Redis runs (MONITOR), for counting the
// round trips a request costs. Redis runs commands one after another and
// MONITOR reports them in that order, so the commands a request made are
// the ones reported before a marker sent after its answer arrived.
type redisMonitor struct {
	t      *testing.T
	prefix string
	lines  chan string
	marker func(string)
	n      int
}

func newRedisMonitor(t *testing.T, addr, prefix string) *redisMonitor {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := rd.ReadString('\n'); err != nil || l != "+OK\r\n" {
		t.Fatalf("MONITOR = %q, %v", l, err)
	}
	m := &redisMonitor{t: t, prefix: prefix, lines: make(chan string, 4096)}
	go func() {
		defer close(m.lines)
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			m.lines <- l
		}
	}()
	mc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mc.Close() })
	mrd := bufio.NewReader(mc)
	m.marker = func(s string) {
		fmt.Fprintf(mc, "ECHO %s\r\n", s)
		if _, err := mrd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
		if _, err := mrd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	m.commands() // what ran before: the start's
	return m
}

// commands returns the names of the commands that clients (not scripts)
// sent about the store's records and notices (an argument starting with
// the key prefix; the epoch watcher's GET left out) since the last call.
func (m *redisMonitor) commands() []string {
	m.t.Helper()
	m.n++
	mark := fmt.Sprintf("round-trip-marker-%d", m.n)
	m.marker(mark)
	var cmds []string
	timeout := time.After(10 * time.Second)
	for {
		var l string
		select {
		case l = <-m.lines:
		case <-timeout:
			m.t.Fatal("MONITOR did not report the marker within 10s")
		}
		_, rest, ok := strings.Cut(l, "] ")
		switch {
		case !ok:
			continue
		case strings.Contains(rest, `"`+mark+`"`):
			return cmds
		case strings.Contains(l, " lua] "), !strings.Contains(rest, `"`+m.prefix),
			strings.Contains(rest, `"`+m.prefix+`epoch"`):
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(rest, `"`), `"`)
		name = strings.ToLower(name)
		if name == "subscribe" || name == "ssubscribe" {
			// The process's one notice subscription, made on its own
			// connection when the app starts (and again after a
			// reconnect): not a request's round trip, and it may land
			// after the start's marker on a loaded machine.
			continue
		}
		cmds = append(cmds, name)
	}
}

// TestRedisRoundTripsPerRequest pins the Redis commands each kind of
// request costs (issue 31), on a Redis of the test's own whose script
// cache starts empty, as after a deploy: a pass-through, an unkeyed write
// and a request on a route that is not idempotent touch no store; a keyed
// first write is its claim and its completion, from the very first one
// (the functions are loaded at start: no FCALL refused with "Function not
// found", a FUNCTION LOAD and an EVALSHA), with the completion notice of a
// waiting route published by the completion's own function; a release
// likewise; a replay from the replay cache costs nothing, and a duplicate
// of a running request one claim attempt.
func TestRedisRoundTripsPerRequest(t *testing.T) {
	own := redistest.StartOwn(t)
	hold := make(chan struct{})
	reached := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/hold":
			reached <- struct{}{}
			<-hold
		case r.Header.Get("Idempotency-Key") == "released":
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case r.Method == http.MethodGet:
			w.Write([]byte(`{"id":"1"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"pay_1"}`))
	}))
	t.Cleanup(up.Close)
	prefix := e2ePrefix(t)
	base := startReplica(t, e2eConfig(t, e2eYAML(up.URL, own.Addr, prefix, `
  - {name: item, method: GET, path: "/items/{id}"}
  - {name: hold, method: POST, path: /hold, idempotent: true, in_progress: reject}
idempotency: {in_progress: wait, release_statuses: [503]}
`)))
	c := e2eClient(t)
	mon := newRedisMonitor(t, own.Addr, prefix)
	send := func(method, path, key string) int {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"amount":1}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer e2e-client")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	check := func(name string, status, wantStatus int, want ...string) {
		t.Helper()
		got := mon.commands()
		if status != wantStatus || !slices.Equal(got, want) {
			t.Errorf("%s: status %d, Redis commands %q; want %d, %q", name, status, got, wantStatus, want)
		}
	}
	check("keyed first write, the first request", send("POST", "/pay", "k1"), 201, "fcall", "fcall")
	check("keyed first write", send("POST", "/pay", "k2"), 201, "fcall", "fcall")
	check("replay, filling the replay cache", send("POST", "/pay", "k2"), 201, "fcall")
	check("replay from the replay cache", send("POST", "/pay", "k2"), 201)
	check("pass-through GET", send("GET", "/other/1", ""), 200)
	check("GET on a route that is not idempotent", send("GET", "/items/1", ""), 200)
	check("unkeyed POST", send("POST", "/pay", ""), 201)
	check("keyed write released (503)", send("POST", "/pay", "released"), 503, "fcall", "fcall")

	original := make(chan int, 1)
	go func() { original <- send("POST", "/hold", "h1") }()
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the original did not reach the upstream")
	}
	check("original's claim", 0, 0, "fcall")
	check("duplicate of a running request", send("POST", "/hold", "h1"), http.StatusConflict, "fcall")
	close(hold)
	check("original's completion", <-original, 201, "fcall")

	// The notice folded into the scripts still reaches the other replicas:
	// a subscriber of the channel gets one per completion.
	sub := own.Client()
	defer sub.Close()
	ps := sub.Subscribe(context.Background(), prefix+"notices")
	defer ps.Close()
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	mon.commands() // the SUBSCRIBE
	check("keyed first write, with a subscriber", send("POST", "/pay", "k3"), 201, "fcall", "fcall")
	select {
	case msg := <-ps.Channel():
		if len(msg.Payload) != 64 {
			t.Errorf("notice %q: want a record's key in hex", msg.Payload)
		}
	case <-time.After(10 * time.Second):
		t.Error("no completion notice within 10s")
	}
}
