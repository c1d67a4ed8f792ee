package testutil

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

type heldAnswer struct {
	status int
	body   string
	err    error
}

// send posts to u's path with key and the header pairs hdr, in the
// background.
func send(ctx context.Context, u *HeldUpstream, path, key string, hdr ...string) <-chan heldAnswer {
	c := make(chan heldAnswer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", u.URL+path, nil)
		req.Header.Set("Idempotency-Key", key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		res, err := u.Client().Do(req)
		if err != nil {
			c <- heldAnswer{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		c <- heldAnswer{res.StatusCode, string(b), err}
	}()
	return c
}

// A shut HeldUpstream holds every request until Open, queues their keys
// in arrival order and counts them; a request cancelled while held is
// counted; Shut holds the next ones again.
func TestHeldUpstream(t *testing.T) {
	t.Parallel()
	u := NewHeldUpstream(t, HeldOptions{})
	a1 := send(t.Context(), u, "/p", "a")
	u.Arrival(t, "a")
	b := send(t.Context(), u, "/p", "b")
	u.Arrival(t, "b")
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if r := <-send(ctx, u, "/q", "c"); !errors.Is(r.err, context.DeadlineExceeded) {
		t.Fatalf("a request to the shut upstream = %+v; want it held past its deadline", r)
	}
	u.Arrival(t, "c")
	Eventually(t, 10*time.Second, "the held request's cancellation counted", func() bool { return u.Cancelled() == 1 })
	u.Open()
	for _, x := range []struct {
		ch   <-chan heldAnswer
		want string
	}{{a1, `{"key":"a","execution":1}`}, {b, `{"key":"b","execution":1}`}} {
		if r := <-x.ch; r.err != nil || r.status != http.StatusCreated || r.body != x.want {
			t.Errorf("answer = %+v; want 201 %s", r, x.want)
		}
	}
	if r := <-send(t.Context(), u, "/p", "a"); r.status != http.StatusCreated || r.body != `{"key":"a","execution":2}` {
		t.Errorf("a's second request, upstream open = %+v; want 201 execution 2 at once", r)
	}
	u.Arrival(t, "a") // held requests are queued whether or not the upstream is open
	u.Shut()
	d := send(t.Context(), u, "/p", "d")
	u.Arrival(t, "d")
	if key, ok := u.Next(0); ok {
		t.Errorf("Next = %q; want no request left in the queue", key)
	}
	u.Open()
	if r := <-d; r.status != http.StatusCreated {
		t.Errorf("d, held after Shut, then opened = %+v; want 201", r)
	}
	if got, want := u.Order(), []string{"a", "b", "c", "a", "d"}; !slices.Equal(got, want) {
		t.Errorf("Order = %q; want %q", got, want)
	}
	if u.Count("a") != 2 || u.Count("c") != 1 || u.Count("x") != 0 {
		t.Errorf("Count a, c, x = %d, %d, %d; want 2, 1, 0", u.Count("a"), u.Count("c"), u.Count("x"))
	}
	if perPath, peak := u.Concurrency(); perPath["/p"] != 2 || perPath["/q"] != 1 || peak != 3 {
		t.Errorf("Concurrency = %v, peak %d; want /p 2, /q 1, peak 3", perPath, peak)
	}
}

// With Hold, only the requests it picks wait and are queued; Answer
// answers every request, as it returns, while it counts as running.
func TestHeldUpstreamOptions(t *testing.T) {
	t.Parallel()
	answering := make(chan struct{})
	var answer sync.Once
	letAnswer := func() { answer.Do(func() { close(answering) }) }
	u := NewHeldUpstream(t, HeldOptions{
		Hold: func(r *http.Request) bool { return r.Header.Get("X-Hold") != "" },
		Answer: func(w http.ResponseWriter, r *http.Request, n int) {
			if r.Header.Get("X-Slow") != "" {
				<-answering
			}
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, r.Header.Get("Idempotency-Key"))
		},
	})
	t.Cleanup(letAnswer) // before the upstream's Close, if the test fails first
	held := send(t.Context(), u, "/p", "held", "X-Hold", "1")
	u.Arrival(t, "held")
	if r := <-send(t.Context(), u, "/p", "free"); r.status != http.StatusAccepted || r.body != "free" {
		t.Fatalf("a request Hold does not pick = %+v; want 202 free at once", r)
	}
	slow := send(t.Context(), u, "/p", "slow", "X-Slow", "1")
	Eventually(t, 10*time.Second, "the slow answer running beside the held request", func() bool {
		perPath, _ := u.Concurrency()
		return perPath["/p"] == 2
	})
	letAnswer()
	if r := <-slow; r.status != http.StatusAccepted || r.body != "slow" {
		t.Errorf("slow = %+v; want 202 slow", r)
	}
	if key, ok := u.Next(0); ok {
		t.Errorf("Next = %q; want only the held request queued", key)
	}
	u.Open()
	if r := <-held; r.status != http.StatusAccepted || r.body != "held" {
		t.Errorf("held = %+v; want 202 held", r)
	}
}
