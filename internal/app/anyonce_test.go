package app

// The public conformance vectors of draft-ietf-httpapi-idempotency-key-header-07
// (github.com/sns45/anyonce, conformance/vectors, Apache-2.0) driven through
// idemgate with profile: ietf. The vectors are not copied into this
// repository: scripts/anyonce-vectors.sh fetches them from the Go module
// proxy and `make test-ietf` runs this test on them; it is skipped without
// IDEMGATE_ANYONCE_VECTORS. docs/ietf.md names each difference and the
// guarantee that requires it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// anyonceVectorsEnv names the directory holding the vectors' core/ and
// profile/ folders (a checkout's conformance/vectors).
const anyonceVectorsEnv = "IDEMGATE_ANYONCE_VECTORS"

// anyonceDifferences are the vectors idemgate does not pass under profile
// ietf, each with the exact failures it must show (a trailing * matches
// any rest): a guarantee requires them (docs/ietf.md). A vector that
// starts passing, or fails otherwise, fails the test.
var anyonceDifferences = map[string][]string{
	// A 500 is stored: the write may have happened, and no write runs
	// twice (DESIGN.md step 8).
	"profile/5xx-not-stored": {
		`retry: header Idempotency-Replayed: want absent, got "true"`,
		"retry: handlerInvocations: want 2, got 1",
	},
	// A replay is the original answer or an error, never an empty 200
	// (DESIGN.md step 5: too large → 409 idempotency_response_too_large).
	"profile/omitted-body-replay": {
		"retry: status: want 200, got 409",
		`retry: header Idempotency-Replay: want "omitted", got absent`,
		`retry: header Idempotency-Replayed: want "true", got absent`,
		"retry: bodyBytes: want 0, got *", // the 409's own length
	},
}

// anyonceVector is one vector: an id, the capabilities it needs and its
// steps, in the vectors' JSON format (conformance/schema.json).
type anyonceVector struct {
	ID       string        `json:"id"`
	DraftRef string        `json:"draftRef"`
	Requires []string      `json:"requires"`
	Steps    []anyonceStep `json:"steps"`
}

type anyonceStep struct {
	ID             string   `json:"id"`
	DelayMs        int      `json:"delayMs"`
	ConcurrentWith []string `json:"concurrentWith"`
	Request        struct {
		Method  string            `json:"method"`
		Path    string            `json:"path"`
		Headers map[string]string `json:"headers"`
		Body    *string           `json:"body"`
	} `json:"request"`
	Expect struct {
		Status             int                        `json:"status"`
		Headers            map[string]json.RawMessage `json:"headers"`
		BodyEquals         json.RawMessage            `json:"bodyEquals"`
		BodyJSON           map[string]any             `json:"bodyJson"`
		BodyBytes          *int                       `json:"bodyBytes"`
		HandlerInvocations *int                       `json:"handlerInvocations"`
	} `json:"expect"`
}

// loadAnyonceVectors reads every vector under dir's core/ and profile/.
func loadAnyonceVectors(t *testing.T, dir string) []anyonceVector {
	t.Helper()
	var out []anyonceVector
	for _, tier := range []string{"core", "profile"} {
		files, err := filepath.Glob(filepath.Join(dir, tier, "*.json"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no vectors in %s/ (%v)", dir, tier, err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var v anyonceVector
			if err := json.Unmarshal(data, &v); err != nil || v.ID == "" || len(v.Steps) == 0 {
				t.Fatalf("%s: not a vector: %v", f, err)
			}
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b anyonceVector) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// anyonceFixture is the vectors' fixture application (their README's
// fixture contract): POST /echo, /status/{code}, /slow?ms=N and
// /large?bytes=N each count one handler run; GET /counter reads the count;
// POST /reset, reached directly and not through idemgate, zeroes it.
type anyonceFixture struct {
	*httptest.Server
	runs atomic.Int64
}

func newAnyonceFixture(t *testing.T) *anyonceFixture {
	f := &anyonceFixture{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		q := r.URL.Query()
		switch {
		case r.Method == "POST" && r.URL.Path == "/reset":
			f.runs.Store(0)
			w.WriteHeader(http.StatusNoContent)
		case r.Method == "GET" && r.URL.Path == "/counter":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"count": %d}`, f.runs.Load())
		case r.Method == "POST" && r.URL.Path == "/echo":
			f.runs.Add(1)
			ct := r.Header.Get("Content-Type")
			if ct == "" {
				ct = "application/octet-stream"
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(http.StatusCreated)
			w.Write(body)
		case r.Method == "POST" && strings.HasPrefix(r.URL.Path, "/status/"):
			f.runs.Add(1)
			code, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/status/"))
			if err != nil || code < 200 || code > 599 {
				http.Error(w, "bad status", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(code)
			fmt.Fprintf(w, "status:%d", code)
		case r.Method == "POST" && r.URL.Path == "/slow":
			f.runs.Add(1)
			ms, _ := strconv.Atoi(q.Get("ms"))
			select { // the vectors' own timing: an original held this long
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "slept:%d", ms)
		case r.Method == "POST" && r.URL.Path == "/large":
			f.runs.Add(1)
			n, _ := strconv.Atoi(q.Get("bytes"))
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(bytes.Repeat([]byte("x"), n))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// anyonceConfig is idemgate in front of the fixture with profile: ietf.
// The vectors send no credentials, so no identity is required (an
// anonymous API); the echo route keeps its records 2 s, the vectors'
// short-ttl capability (a TTL of at most 2000 ms).
func anyonceConfig(upstream, store string) string {
	return `
profile: ietf
upstream: {url: "` + upstream + `", timeout: 2s}
edge_limit: {rate: 0}
idempotency: {require_identity: false, lease: 1s, max_lease: 2s, late_answer_wait: 0s}
` + store + `
routes:
  - {name: echo, method: POST, path: /echo, idempotent: true, require_key: true, retention: 2s}
  - {name: status, method: POST, path: "/status/{code}", idempotent: true, require_key: true}
  - {name: slow, method: POST, path: /slow, idempotent: true, require_key: true}
  - {name: large, method: POST, path: /large, idempotent: true, require_key: true}
  - {name: counter, method: GET, path: /counter}
`
}

// TestAnyonceVectors runs every vector through idemgate (profile: ietf),
// on the memory store and on Redis: each passes, or fails exactly as
// anyonceDifferences (and docs/ietf.md) say.
func TestAnyonceVectors(t *testing.T) {
	dir := os.Getenv(anyonceVectorsEnv)
	if dir == "" {
		t.Skip(anyonceVectorsEnv + " is not set: `make test-ietf` fetches the vectors (scripts/anyonce-vectors.sh) and runs this test")
	}
	vectors := loadAnyonceVectors(t, dir)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			f := newAnyonceFixture(t)
			yaml := ""
			if store == "redis" {
				yaml = `store: {backend: redis, redis: {addrs: ["` + redistest.Addr(t) + `"], key_prefix: "` + redistest.Prefix(t) + `"}}`
			}
			a, err := New(e2eConfig(t, anyonceConfig(f.URL, yaml)), Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			run := &anyonceRun{base: serveTestApp(t, a), fixture: f.URL, c: &http.Client{Timeout: 30 * time.Second}}
			passed := 0
			for _, v := range vectors {
				got := run.vector(t, v)
				want := anyonceDifferences[v.ID]
				switch {
				case len(got) == 0 && len(want) == 0:
					passed++
				case len(want) == 0:
					t.Errorf("%s (%s): %s", v.ID, v.DraftRef, strings.Join(got, "; "))
				case !slices.EqualFunc(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)), func(g, w string) bool {
					rest, any := strings.CutSuffix(w, "*")
					return g == w || any && strings.HasPrefix(g, rest)
				}):
					t.Errorf("%s: a documented difference (docs/ietf.md) now fails as\n\t%s\nwant\n\t%s", v.ID, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
				}
			}
			t.Logf("%d of %d vectors pass; %d documented differences", passed, len(vectors), len(anyonceDifferences))
		})
	}
}

// anyonceRun sends a vector's steps to idemgate at base, as the vectors'
// runner does (the execution rules of their conformance/README.md).
type anyonceRun struct {
	base, fixture string
	c             *http.Client
}

type anyonceAnswer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

// send sends req's headers as spelled (a lowercase name stays lowercase
// on the wire).
func (r *anyonceRun) send(base string, s anyonceStep) anyonceAnswer {
	var body io.Reader
	if s.Request.Body != nil {
		body = strings.NewReader(*s.Request.Body)
	}
	req, err := http.NewRequest(s.Request.Method, base+s.Request.Path, body)
	if err != nil {
		return anyonceAnswer{err: err}
	}
	for k, v := range s.Request.Headers {
		req.Header[k] = []string{v}
	}
	res, err := r.c.Do(req)
	if err != nil {
		return anyonceAnswer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return anyonceAnswer{res.StatusCode, res.Header, b, err}
}

// count reads the fixture's handler runs through idemgate (GET /counter).
func (r *anyonceRun) count(t *testing.T) int {
	var get anyonceStep
	get.Request.Method, get.Request.Path = "GET", "/counter"
	a := r.send(r.base, get)
	var c struct{ Count int }
	if a.err != nil || a.status != 200 || json.Unmarshal(a.body, &c) != nil {
		t.Fatalf("GET /counter = %d %s %v", a.status, a.body, a.err)
	}
	return c.Count
}

// vector runs v and returns its failures, each "step: what". The fixture's
// count is reset first. A step named in a later step's concurrentWith is
// sent and left pending; that later step waits its delay, is sent, and the
// group is checked together after one count; any other step first settles
// what is pending.
func (r *anyonceRun) vector(t *testing.T, v anyonceVector) []string {
	t.Helper()
	var reset anyonceStep
	reset.Request.Method, reset.Request.Path = "POST", "/reset"
	if a := r.send(r.fixture, reset); a.err != nil || a.status != http.StatusNoContent {
		t.Fatalf("%s: reset = %d %v", v.ID, a.status, a.err)
	}
	for _, c := range v.Requires {
		if c != "short-ttl" { // the only capability the config gives
			t.Fatalf("%s requires %q, which this run does not declare", v.ID, c)
		}
	}
	deferred := map[string]bool{}
	for _, s := range v.Steps {
		for _, id := range s.ConcurrentWith {
			deferred[id] = true
		}
	}
	type sent struct {
		step anyonceStep
		ch   chan anyonceAnswer
	}
	var pending []sent
	prior := map[string][]byte{}
	var failures []string
	settle := func(group []sent) {
		answers := make([]anyonceAnswer, len(group))
		count := -1 // read once, when a step of the group expects it
		for i, g := range group {
			answers[i] = <-g.ch
			if answers[i].err != nil {
				t.Fatalf("%s/%s: %v", v.ID, g.step.ID, answers[i].err)
			}
		}
		if slices.ContainsFunc(group, func(g sent) bool { return g.step.Expect.HandlerInvocations != nil }) {
			count = r.count(t)
		}
		for i, g := range group {
			for _, f := range checkAnyonce(g.step, answers[i], prior, count) {
				failures = append(failures, g.step.ID+": "+f)
			}
			prior[g.step.ID] = answers[i].body
		}
	}
	for _, s := range v.Steps {
		if len(s.ConcurrentWith) == 0 && len(pending) > 0 {
			settle(pending)
			pending = nil
		}
		time.Sleep(time.Duration(s.DelayMs) * time.Millisecond) // the vector's own delay
		ch := make(chan anyonceAnswer, 1)
		go func(s anyonceStep) { ch <- r.send(r.base, s) }(s)
		cur := sent{s, ch}
		if deferred[s.ID] {
			pending = append(pending, cur)
			continue
		}
		var group []sent
		pending = slices.DeleteFunc(pending, func(p sent) bool {
			if slices.Contains(s.ConcurrentWith, p.step.ID) {
				group = append(group, p)
				return true
			}
			return false
		})
		if len(group) != len(s.ConcurrentWith) {
			t.Fatalf("%s/%s: concurrentWith %v names a step that is not pending", v.ID, s.ID, s.ConcurrentWith)
		}
		settle(append(group, cur))
	}
	if len(pending) > 0 {
		settle(pending)
	}
	return failures
}

// checkAnyonce compares a with s's expectation, as the vectors' schema
// defines it: status; each header equal to a string, present, absent or
// matching a regex; the body equal to a string or to an earlier step's
// body; the body a JSON object with these members; the body's length; the
// fixture's handler runs (count) after the step.
func checkAnyonce(s anyonceStep, a anyonceAnswer, prior map[string][]byte, count int) []string {
	e := s.Expect
	var out []string
	if a.status != e.Status {
		out = append(out, fmt.Sprintf("status: want %d, got %d", e.Status, a.status))
	}
	for name, raw := range e.Headers {
		vals, present := a.header[http.CanonicalHeaderKey(name)]
		got := "absent"
		if present {
			got = strconv.Quote(strings.Join(vals, ", "))
		}
		var want string
		var rule struct {
			Present, Absent bool
			Regex           *string
		}
		switch {
		case json.Unmarshal(raw, &want) == nil:
			if !present || strings.Join(vals, ", ") != want {
				out = append(out, fmt.Sprintf("header %s: want %q, got %s", name, want, got))
			}
		case json.Unmarshal(raw, &rule) != nil:
			out = append(out, fmt.Sprintf("header %s: unknown expectation %s", name, raw))
		case rule.Present && !present:
			out = append(out, fmt.Sprintf("header %s: want present, got absent", name))
		case rule.Absent && present:
			out = append(out, fmt.Sprintf("header %s: want absent, got %s", name, got))
		case rule.Regex != nil:
			re, err := regexp.Compile(*rule.Regex)
			if err != nil || !present || !re.MatchString(strings.Join(vals, ", ")) {
				out = append(out, fmt.Sprintf("header %s: want /%s/, got %s", name, *rule.Regex, got))
			}
		}
	}
	if len(e.BodyEquals) > 0 {
		var want string
		var same struct{ SameAs string }
		switch {
		case json.Unmarshal(e.BodyEquals, &want) == nil:
		case json.Unmarshal(e.BodyEquals, &same) == nil && prior[same.SameAs] != nil:
			want = string(prior[same.SameAs])
		default:
			out = append(out, fmt.Sprintf("bodyEquals: unknown expectation %s", e.BodyEquals))
		}
		if string(a.body) != want {
			out = append(out, fmt.Sprintf("body: want %q, got %q", want, a.body))
		}
	}
	if len(e.BodyJSON) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(a.body, &obj); err != nil {
			out = append(out, fmt.Sprintf("body: want a JSON object, got %q", a.body))
		}
		for k, want := range e.BodyJSON {
			if got, ok := obj[k]; obj != nil && (!ok || got != want) {
				out = append(out, fmt.Sprintf("body.%s: want %v, got %v", k, want, got))
			}
		}
	}
	if e.BodyBytes != nil && len(a.body) != *e.BodyBytes {
		out = append(out, fmt.Sprintf("bodyBytes: want %d, got %d", *e.BodyBytes, len(a.body)))
	}
	if e.HandlerInvocations != nil && count != *e.HandlerInvocations {
		out = append(out, fmt.Sprintf("handlerInvocations: want %d, got %d", *e.HandlerInvocations, count))
	}
	return out
}
