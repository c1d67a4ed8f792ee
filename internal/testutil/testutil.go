// Package testutil holds the small helpers several packages' tests share: a
// settable clock and a goroutine-safe buffer for captured logs.
package testutil

import (
	"bytes"
	"sync"
	"time"
)

// Clock is a fake clock that moves only when told to. It is safe for
// concurrent use; its zero value starts at the zero time.
type Clock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers, for logs that
// servers write while a test reads them.
type SyncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
