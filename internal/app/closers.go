package app

import "errors"

// closeStack holds what the builders opened, to close last opened first: a
// thing closes before what it uses (a store before its Redis client, the
// ACME manager before its storage). It is the app's one shutdown order.
type closeStack struct{ fns []func() error }

// push adds f, to run before everything pushed earlier.
func (c *closeStack) push(f func() error) { c.fns = append(c.fns, f) }

// close runs the closers, last pushed first, empties the stack and returns
// their errors joined.
func (c *closeStack) close() error {
	var errs []error
	for i := len(c.fns) - 1; i >= 0; i-- {
		if err := c.fns[i](); err != nil {
			errs = append(errs, err)
		}
	}
	c.fns = nil
	return errors.Join(errs...)
}
