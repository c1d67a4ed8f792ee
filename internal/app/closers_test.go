package app

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Once the shutdown's deadline has passed, the closers left share
// lateClose: every one still running then is abandoned (and counted), not
// only the first (before, a second hung closer was waited for without
// bound), each later one still gets minLateClose, and the ones that return
// keep their order and errors.
func TestCloseStackAbandonsLateClosers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var ran []string
		record := func(name string) {
			mu.Lock()
			defer mu.Unlock()
			ran = append(ran, name)
		}
		release := make(chan struct{})
		defer close(release)
		block := func(name string) func(context.Context) error {
			return func(context.Context) error {
				record(name)
				<-release // ignores ctx: a close that hangs
				return nil
			}
		}
		var c closeStack
		c.push(func() error { record("first pushed"); return errors.New("boom") })
		c.pushCtx(block("hung 2"))
		c.pushCtx(block("hung 1"))
		c.pushCtx(func(ctx context.Context) error { record("obeys ctx"); <-ctx.Done(); return nil })
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := c.closeCtx(ctx)
		if took, want := time.Since(start), time.Second+lateClose+minLateClose; took != want {
			t.Errorf("closeCtx took %v; want %v: the deadline, lateClose for the first hung closer, minLateClose for the second", took, want)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := "obeys ctx,hung 1,hung 2,first pushed"; strings.Join(ran, ",") != want {
			t.Errorf("ran %v; want %s", ran, want)
		}
		if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "2 closers still running") {
			t.Errorf("closeCtx = %v; want boom and 2 abandoned", err)
		}
	})
}
