package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestLateAnswerStreamCut: an answer whose head went out within its
// timeout streams on past it, within the late wait, and is cut at the
// wait's end, the upstream's request cancelled. (The late wait's end is
// armed only when the timeout passes with the call running: issue 31.)
func TestLateAnswerStreamCut(t *testing.T) {
	t.Parallel()
	const wait = 300 * time.Millisecond
	cancelled := make(chan struct{})
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-release:
		}
	}))
	t.Cleanup(up.Close)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		w := wait
		o.Stages.Routes = []Route{{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true, Timeout: lateTimeout, LateAnswerWait: &w}}
	})
	// Before the proxy's server closes (cleanups run last first): a call
	// never cut would hold it open.
	t.Cleanup(func() { close(release) })
	req, err := http.NewRequest("POST", tp.URL+"/pay", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", "k1")
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: tp.Client().Transport, Timeout: lateTimeout + wait + 10*time.Second}
	start := time.Now()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("status %d; want the upstream's 201 (its head went out within the timeout)", res.StatusCode)
	}
	body, err := io.ReadAll(res.Body)
	took := time.Since(start)
	if err == nil || string(body) != "part" {
		t.Errorf("body %q, error %v; want %q, then the stream cut", body, err, "part")
	}
	if took < lateTimeout+wait || took > lateTimeout+wait+5*time.Second {
		t.Errorf("the stream was cut after %v; want at the late wait's end (%v)", took, lateTimeout+wait)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the upstream's request was not cancelled at the late wait's end")
	}
}
