package app

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// closeStack holds what the builders opened, to close last opened first: a
// thing closes before what it uses (a store before its Redis client, the
// ACME manager before its storage). It is the app's one shutdown order.
type closeStack struct{ fns []func(context.Context) error }

// push adds f, to run before everything pushed earlier.
func (c *closeStack) push(f func() error) {
	c.fns = append(c.fns, func(context.Context) error { return f() })
}

// pushCtx adds f, to run before everything pushed earlier, with the
// shutdown's context: f must return once it is done (the --grace deadline
// passed), as [proxy.Proxy.Shutdown] and keystore.ReleaseRetrier.Close do.
func (c *closeStack) pushCtx(f func(context.Context) error) { c.fns = append(c.fns, f) }

// close runs the closers with no deadline (see closeCtx).
func (c *closeStack) close() error { return c.closeCtx(context.Background()) }

// lateClose is how long, in all, the closers may run on after the
// shutdown's deadline, to finish what they were doing at it; each closer
// after that still gets minLateClose, so that one that returns at once
// (a flush, a file close) is not abandoned unrun.
const (
	lateClose    = 250 * time.Millisecond
	minLateClose = 10 * time.Millisecond
)

// closeCtx runs the closers, last pushed first, each with ctx, empties the
// stack and returns their errors joined. Shutdown ends within --grace
// (DESIGN.md, Bounds): once ctx is done, the closers left share lateClose
// (each at least minLateClose), and one that has not returned by then is
// abandoned (counted in the error) while the next one starts, so that each
// gets its chance.
func (c *closeStack) closeCtx(ctx context.Context) error {
	var errs []error
	abandoned := 0
	var lateBy time.Time // set at the deadline: the end of lateClose
	for i := len(c.fns) - 1; i >= 0; i-- {
		f := c.fns[i]
		done := make(chan error, 1)
		go func() { done <- f(ctx) }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			if lateBy.IsZero() {
				lateBy = time.Now().Add(lateClose)
			}
			t := time.NewTimer(max(time.Until(lateBy), minLateClose))
			select {
			case err = <-done:
			case <-t.C:
				abandoned++
			}
			t.Stop()
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	c.fns = nil
	if abandoned > 0 {
		errs = append(errs, fmt.Errorf("%d closers still running at the shutdown deadline were abandoned: %w", abandoned, context.Cause(ctx)))
	}
	return errors.Join(errs...)
}
