// Package tick runs the periodic work (sweeps, flushes) of a goroutine that
// its owner starts, stops and waits for.
package tick

import "time"

// Every calls fn with the tick's time every interval until stop is closed,
// then returns. The caller runs it in the goroutine it owns.
func Every(stop <-chan struct{}, interval time.Duration, fn func(now time.Time)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			fn(now)
		}
	}
}
