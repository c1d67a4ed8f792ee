//go:build race

package canonjson_test

// raceEnabled is true under the race detector, which makes sync.Pool drop
// items at random.
const raceEnabled = true
