//go:build !race

package canonjson_test

const raceEnabled = false
