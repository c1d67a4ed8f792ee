package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
)

// The design floor does the work it claims: a request id on every answer
// and forwarded, X-Forwarded-For, one access-log line per request, and a
// keyed POST that runs once, its key claimed for a second request.
func TestDesignFloor(t *testing.T) {
	var ran atomic.Int64
	var forwarded atomic.Value
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		forwarded.Store(r.Header.Get("X-Forwarded-For") + " " + r.Header.Get("X-Request-Id"))
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d}`, ran.Add(1))
			return
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	var logs testutil.SyncBuffer
	reg := prometheus.NewRegistry()
	d := designFloor(&httputil.ReverseProxy{BufferPool: &bufferPool{}}, u, &logs, reg)
	srv := httptest.NewServer(d)
	defer srv.Close()

	do := func(method, key, id string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/orders", strings.NewReader(`{"a":1}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		if id != "" {
			req.Header.Set("X-Request-Id", id)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header
	}

	code, body, h := do("GET", "", "")
	made := h.Get("X-Request-Id")
	if code != 200 || body != "ok" || made == "" {
		t.Fatalf("GET: %d %q, request id %q", code, body, made)
	}
	if got := forwarded.Load(); got != "127.0.0.1 "+made {
		t.Errorf("upstream got X-Forwarded-For and X-Request-Id %q; want 127.0.0.1 %s", got, made)
	}
	for _, id := range []string{"", "a b", strings.Repeat("x", 201), "caf\u00e9"} {
		if _, _, h := do("GET", "", id); h.Get("X-Request-Id") == id {
			t.Errorf("request id %q kept; want one made", id)
		}
	}
	if _, _, h := do("GET", "", "mine-1"); h.Get("X-Request-Id") != "mine-1" {
		t.Errorf("request id mine-1 answered as %q", h.Get("X-Request-Id"))
	}

	if code, body, _ := do("POST", "k-1", ""); code != 201 || body != `{"run":1}` {
		t.Fatalf("first keyed POST: %d %q", code, body)
	}
	if code, _, _ := do("POST", "k-1", ""); code != http.StatusConflict {
		t.Errorf("second keyed POST: %d; want 409", code)
	}
	if code, _, _ := do("POST", "bad key", ""); code != http.StatusBadRequest {
		t.Errorf("keyed POST with a bad key: %d; want 400", code)
	}
	if code, _, _ := do("POST", "k-2", ""); code != 201 || ran.Load() != 2 {
		t.Errorf("another key: %d, upstream ran %d times; want 201, 2", code, ran.Load())
	}
	d.mu.Lock()
	stored := len(d.claims)
	var answer []byte
	for _, v := range d.claims {
		if bytes.Contains(v, []byte(`{"run":1}`)) {
			answer = v
		}
	}
	d.mu.Unlock()
	if stored != 2 || !bytes.HasPrefix(answer, []byte("201\r\n")) {
		t.Errorf("%d answers kept, the first %q; want 2, starting 201", stored, answer)
	}

	if err := d.flushLog(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 10 {
		t.Fatalf("%d access-log lines; want 10:\n%s", len(lines), logs.String())
	}
	outcomes := map[string]int{}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		outcomes[fmt.Sprint(m["outcome"], " ", m["status"])]++
	}
	want := map[string]int{"passthrough 200": 6, "executed 201": 2, "in_progress 409": 1, "rejected 400": 1}
	if fmt.Sprint(outcomes) != fmt.Sprint(want) {
		t.Errorf("outcomes %v; want %v", outcomes, want)
	}
	if n, err := reg.Gather(); err != nil || len(n) != 2 {
		t.Errorf("metrics: %d families, %v; want 2", len(n), err)
	}
}
