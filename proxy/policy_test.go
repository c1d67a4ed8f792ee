package proxy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/modes"
	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/limiter"
)

// Each per-route policy key overrides its global value on its route and
// only there (DESIGN.md, Config: "Per route also").
func TestRoutePolicyRetentionOverridesGlobal(t *testing.T) {
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Idempotency.Retention = time.Hour
		o.Idempotency.MaxLease = time.Hour
		o.Stages.Routes = []Route{
			{Name: "plain", Method: "POST", Path: "/plain", Idempotent: true},
			{Name: "payment", Method: "POST", Path: "/pay", Idempotent: true, Retention: 48 * time.Hour},
		}
	})
	for _, path := range []string{"/plain", "/pay"} {
		if r := tp.do(t, "POST", path, "k"+path, `{}`); r.status != http.StatusCreated {
			t.Fatalf("POST %s = %v", path, r)
		}
	}
	tp.clock.Advance(2 * time.Hour)
	if r := tp.do(t, "POST", "/pay", "k/pay", `{}`); r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("POST /pay 2h later (retention 48h) = %v, want a replay", r)
	}
	if r := tp.do(t, "POST", "/plain", "k/plain", `{}`); r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("POST /plain 2h later (global retention 1h) = %v, want a new execution", r)
	}
	if got := up.executions("POST", "/plain", "k/plain"); got != 2 {
		t.Errorf("/plain ran %d times, want 2", got)
	}
	if got := up.executions("POST", "/pay", "k/pay"); got != 1 {
		t.Errorf("/pay ran %d times, want 1", got)
	}
}

func TestRoutePolicyReleaseStatusesOverrideGlobal(t *testing.T) {
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(http.StatusUnprocessableEntity) // in the global list
		w.Write([]byte(`{"n":` + string(rune('0'+n%10)) + `}`))
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{
			{Name: "global", Method: "POST", Path: "/global", Idempotent: true},
			{Name: "only500", Method: "POST", Path: "/only500", Idempotent: true, ReleaseStatuses: []int{500}},
			{Name: "none", Method: "POST", Path: "/none", Idempotent: true, ReleaseStatuses: []int{}},
		}
	})
	for _, tc := range []struct {
		path     string
		wantRuns int
	}{
		{"/global", 2},  // 422 releases: the retry runs
		{"/only500", 1}, // 422 is stored: the retry replays
		{"/none", 1},
	} {
		for range 2 {
			if r := tp.do(t, "POST", tc.path, "k"+tc.path, `{}`); r.status != http.StatusUnprocessableEntity {
				t.Fatalf("POST %s = %v", tc.path, r)
			}
		}
		if got := up.executions("POST", tc.path, "k"+tc.path); got != tc.wantRuns {
			t.Errorf("%s ran %d times, want %d", tc.path, got, tc.wantRuns)
		}
	}
}

func TestRoutePolicyDropHeadersOverrideGlobal(t *testing.T) {
	up := newUpstream(t) // answers with two Set-Cookie headers and X-Execution
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Idempotency.DropHeaders = []string{"X-Execution"}
		o.Stages.Routes = []Route{
			{Name: "global", Method: "POST", Path: "/global", Idempotent: true},
			{Name: "login", Method: "POST", Path: "/login", Idempotent: true, DropHeaders: []string{"set-cookie"}},
		}
	})
	for _, tc := range []struct {
		path             string
		cookies, execHdr bool
	}{
		{"/global", true, false},
		{"/login", false, true},
	} {
		tp.do(t, "POST", tc.path, "k"+tc.path, `{}`)
		r := tp.do(t, "POST", tc.path, "k"+tc.path, `{}`)
		if r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("%s: second POST = %v, want a replay", tc.path, r)
		}
		if got := len(r.header.Values("Set-Cookie")) == 2; got != tc.cookies {
			t.Errorf("%s: replay has Set-Cookie %q, want them: %v", tc.path, r.header.Values("Set-Cookie"), tc.cookies)
		}
		if got := r.header.Get("X-Execution") != ""; got != tc.execHdr {
			t.Errorf("%s: replay has X-Execution %q, want it: %v", tc.path, r.header.Get("X-Execution"), tc.execHdr)
		}
	}
}

// errorsSpec is the UCP chapter's error body.
var ucpErrors = problem.Spec{
	Codes:       map[string]string{"idempotency_key_invalid": "invalid_request", "idempotency_in_progress": "request_in_progress"},
	ContentType: "application/json",
	Body:        `{"error":{"code":{{json .Code}},"message":{{json .Detail}},"request_id":{{json .RequestID}}}}`,
}

func TestRoutePolicyErrorsOverrideGlobal(t *testing.T) {
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Errors = ucpErrors
		o.Stages.Routes = []Route{
			{Name: "global", Method: "POST", Path: "/global", Idempotent: true},
			{Name: "own", Method: "POST", Path: "/own", Idempotent: true, Errors: &problem.Spec{Codes: map[string]string{"idempotency_key_invalid": "bad_key"}}},
			{Name: "gql", Method: "POST", Path: "/graphql", Idempotent: true, Protocol: ProtocolGraphQL, Errors: &problem.Spec{
				Codes:      map[string]string{"idempotency_key_invalid": "API_IDEMPOTENCY_KEY_INVALID"},
				Extensions: `{"class":"CONFLICT","status":{{.Status}}}`,
			}},
		}
	})
	long := strings.Repeat("k", 256) // an invalid key
	for _, tc := range []struct{ path, code string }{{"/global", "invalid_request"}, {"/own", "bad_key"}} {
		r := tp.do(t, "POST", tc.path, long, `{}`)
		if r.status != 400 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %v %s", tc.path, r, r.header.Get("Content-Type"))
		}
		var body struct {
			Error struct {
				Code      string `json:"code"`
				RequestID string `json:"request_id"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Code != tc.code || body.Error.RequestID != r.header.Get("X-Request-Id") {
			t.Errorf("%s: body %s (%v), want code %s and the request ID", tc.path, r.body, err, tc.code)
		}
	}
	r := tp.do(t, "POST", "/graphql", long, `{"query":"mutation { a }"}`)
	var g struct {
		Errors []struct {
			Extensions map[string]any `json:"extensions"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(r.body, &g); err != nil || len(g.Errors) != 1 {
		t.Fatalf("GraphQL answer %v: %v", r, err)
	}
	ext := g.Errors[0].Extensions
	if r.status != 400 || ext["code"] != "API_IDEMPOTENCY_KEY_INVALID" || ext["class"] != "CONFLICT" || ext["status"] != float64(400) || ext["request_id"] == "" {
		t.Errorf("GraphQL answer %v, extensions %v: want the mapped code, the class and the status", r, ext)
	}
}

// An answer made before a route matches (the edge limit's 429) uses the
// global errors, never a route's; its status and Retry-After stay.
func TestErrorsBeforeARouteMatchAreGlobal(t *testing.T) {
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Errors = ucpErrors
		o.Stages.Edge = localEdge(t, limiter.EdgeOptions{Rate: 1, Burst: 0})
		o.Stages.Routes = []Route{{Name: "own", Method: "POST", Path: "/own", Idempotent: true,
			Errors: &problem.Spec{ContentType: "text/plain", Body: "{{.Code}}"}}}
	})
	tp.do(t, "POST", "/own", "", `{}`)
	r := tp.do(t, "POST", "/own", "", `{}`)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || r.header.Get("Content-Type") != "application/json" ||
		!strings.Contains(string(r.body), `"code":"rate_limited"`) {
		t.Errorf("edge 429 = %v %v, want the global errors' shape", r, r.header)
	}
}

// TestApplyNamesUnsetWaitBounds: a library user's Policy that leaves
// WaitTimeout or LateAnswerMax unset while a keyed route needs it is
// refused by Apply with an error naming the field (the policy holds no
// defaults), and the running policy stays; a policy whose routes do not
// use the bound applies.
func TestApplyNamesUnsetWaitBounds(t *testing.T) {
	t.Parallel()
	late := 5 * time.Second
	tests := []struct {
		name  string
		route Route
		unset func(*Idempotency)
		want  string // "" applies
	}{
		{"wait, no wait timeout", Route{InProgress: modes.InProgressWait},
			func(id *Idempotency) { id.WaitTimeout = 0 }, "Policy.Idempotency.WaitTimeout"},
		{"global wait, no wait timeout", Route{},
			func(id *Idempotency) { id.InProgress, id.WaitTimeout = modes.InProgressWait, 0 }, "Policy.Idempotency.WaitTimeout"},
		{"wait, negative wait timeout", Route{InProgress: modes.InProgressWait},
			func(id *Idempotency) { id.WaitTimeout = -time.Second }, "Policy.Idempotency.WaitTimeout"},
		{"wait, the route's own wait timeout", Route{InProgress: modes.InProgressWait, WaitTimeout: time.Second},
			func(id *Idempotency) { id.WaitTimeout = 0 }, ""},
		{"reject, no wait timeout", Route{},
			func(id *Idempotency) { id.WaitTimeout = 0 }, ""},
		{"late wait, no late answer max", Route{},
			func(id *Idempotency) { id.LateAnswerWait, id.LateAnswerMax = late, 0 }, "Policy.Idempotency.LateAnswerMax"},
		{"route's late wait, no late answer max", Route{LateAnswerWait: &late},
			func(id *Idempotency) { id.LateAnswerMax = 0 }, "Policy.Idempotency.LateAnswerMax"},
		{"no late wait, no late answer max", Route{},
			func(id *Idempotency) { id.LateAnswerMax = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			u, _ := url.Parse("http://127.0.0.1:1")
			st := memstore.New(memstore.Options{})
			defer st.Close()
			o := Options{Upstream: u, Store: st}
			p := New(depsOf(o))
			defer p.Close()
			good := policyOf(o)
			if err := p.Apply(good); err != nil {
				t.Fatal(err)
			}
			rt := tt.route
			rt.Name, rt.Method, rt.Path, rt.Idempotent = "pay", "POST", "/pay", true
			pol := policyOf(o)
			pol.Routes = []Route{rt}
			tt.unset(&pol.Idempotency)
			err := p.Apply(pol)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Apply = %v; want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Apply = %v; want an error naming %s", err, tt.want)
			case tt.want != "" && len(p.Policy().Routes) != 0:
				t.Errorf("after a refused Apply the policy has routes %v; want the running one's (none)", p.Policy().Routes)
			}
		})
	}
}
