// Package rediskey holds the rule of every Redis key idemgate writes (the
// store's records, the limiters' buckets, the session locks, the TLS
// storage): a key is the configured prefix, then a Redis Cluster hash tag
// in braces, then the rest, so that each script's keys share one slot.
package rediskey

import (
	"fmt"
	"strings"
)

// CheckPrefix returns an error when prefix contains '{' or '}': a brace in
// the prefix would move the keys' hash tag, and their Cluster slot with it.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("key prefix %q contains '{' or '}'", prefix)
	}
	return nil
}
