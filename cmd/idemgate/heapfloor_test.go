package main

import (
	"bufio"
	"net/http"
	"os"
	"strings"
	"testing"
)

// gcGauges scrapes go_gc_gogc_percent and go_gc_gomemlimit_bytes from a
// /metrics URL.
func gcGauges(t *testing.T, url string) (gogc, limit string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), " ")
		switch name {
		case "go_gc_gogc_percent":
			gogc = v
		case "go_gc_gomemlimit_bytes":
			limit = v
		}
	}
	return gogc, limit
}

// TestBinaryHeapFloor: the binary keeps the collector's heap floor
// (internal/memlimit) when GOGC is unset, logged at start and visible in
// the runtime's own gauges; with GOGC set it leaves the collector alone.
func TestBinaryHeapFloor(t *testing.T) {
	up := newRecorder(t, 0)
	for _, tc := range []struct {
		name, gogc, gomemlimit string // "" unset
		wantLog                string
		floor                  bool
	}{
		{"default", "", "", `"heap_floor":67108864`, true},
		{"GOMEMLIMIT 100 MiB", "", "100MiB", `"heap_floor":26214400`, true},
		{"GOGC set", "100", "", `GOGC left as configured`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range map[string]string{"GOGC": tc.gogc, "GOMEMLIMIT": tc.gomemlimit} {
				t.Setenv(k, v) // restored after the test
				if v == "" {
					os.Unsetenv(k)
				}
			}
			p := startBin(t, boundsYAML(up.URL, "idempotency: {require_identity: false}\n"))
			if !strings.Contains(p.logs.String(), tc.wantLog) {
				t.Errorf("log lacks %s:\n%s", tc.wantLog, p.logs.String())
			}
			gogc, limit := gcGauges(t, "http://"+p.admin+"/metrics")
			if tc.floor {
				// A fresh process's live heap is a few MiB: GOGC well over
				// 100, and a memory limit guarding the floor.
				if gogc == "" || gogc == "100" || limit == "" || limit == "9.223372036854776e+18" {
					t.Errorf("go_gc_gogc_percent %s, go_gc_gomemlimit_bytes %s; want the floor's GOGC over 100 and its guard", gogc, limit)
				}
				return
			}
			if gogc != "100" || limit != "9.223372036854776e+18" {
				t.Errorf("go_gc_gogc_percent %s, go_gc_gomemlimit_bytes %s; want 100 and no limit, as Go's defaults", gogc, limit)
			}
		})
	}
}
