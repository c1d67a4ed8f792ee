// Package filewatch runs the loop of a goroutine that watches files (the
// config file, the TLS certificate files): it waits for fsnotify's events
// to settle, logs the watcher's errors and polls, and calls one function
// whenever the files may have changed. What a change means, and which
// directories are watched, stays with the caller.
package filewatch

import (
	"time"

	"github.com/fsnotify/fsnotify"
)

// Loop is one watch loop's settings.
type Loop struct {
	// Watcher delivers the file events; nil: polling only.
	Watcher *fsnotify.Watcher
	// Relevant says whether an event's file matters; nil: every one does.
	Relevant func(name string) bool
	// Debounce is how long the events must pause before Changed runs, so
	// that a write in several steps is read once.
	Debounce time.Duration
	// MaxDelay, when > 0, bounds how long a stream of events postpones
	// Changed: an event that comes MaxDelay or more after the first one
	// still pending fires at once.
	MaxDelay time.Duration
	// Poll, when > 0, also runs Changed this often, events or not.
	Poll time.Duration
	// Force, when set, runs Changed(true) on every receive. Nil: none.
	Force <-chan struct{}
	// Changed runs on Run's goroutine, one call at a time: forced is true
	// for a receive from Force, false after events settle or on a poll.
	Changed func(forced bool)
	// Error gets the watcher's errors; nil: they are dropped.
	Error func(error)
}

// Run runs the loop until done is closed.
func (l Loop) Run(done <-chan struct{}) {
	var events <-chan fsnotify.Event
	var errs <-chan error
	if l.Watcher != nil {
		events, errs = l.Watcher.Events, l.Watcher.Errors
	}
	var pollC <-chan time.Time
	if l.Poll > 0 {
		t := time.NewTicker(l.Poll)
		defer t.Stop()
		pollC = t.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()
	var first time.Time // when the pending change began; zero: none
	for {
		select {
		case <-done:
			return
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if l.Relevant != nil && !l.Relevant(ev.Name) {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			wait := l.Debounce
			if l.MaxDelay > 0 && now.Sub(first) >= l.MaxDelay {
				wait = 0
			}
			debounce.Reset(wait)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if l.Error != nil {
				l.Error(err)
			}
		case <-debounce.C:
			first = time.Time{}
			l.Changed(false)
		case <-pollC:
			l.Changed(false)
		case <-l.Force:
			l.Changed(true)
		}
	}
}
