// Package rediskey holds the rule of every Redis key idemgate writes (the
// store's records, the limiters' buckets, the session locks, the TLS
// storage): a key is the configured prefix, then a Redis Cluster hash tag
// in braces, then the rest, so that each script's keys share one slot.
// It also holds what every Redis subscriber of idemgate's shares: the
// confirmation of a subscription and the client's read timeout
// (subscribe.go).
package rediskey

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of every key when none is configured
// (store.redis.key_prefix's default).
const DefaultPrefix = "idemgate:"

// TLSTag follows the prefix in every key of the TLS storage (redisstorage):
// one hash tag for all of them. It is the one layout besides the store's
// records that starts with the prefix and a brace, so the store's listings,
// which scan prefix + "{*", leave its keys alone.
const TLSTag = "{certmagic}:"

// Check is what the constructor of every Redis package (redisstore,
// redislimiter, redislock, redisstorage) checks first: that it has a
// client, and that *prefix follows [CheckPrefix]; it sets an empty *prefix
// to DefaultPrefix. Its error begins with pkg.
func Check(pkg string, client redis.UniversalClient, prefix *string) error {
	if client == nil {
		return errors.New(pkg + ": nil client")
	}
	if *prefix == "" {
		*prefix = DefaultPrefix
	}
	if err := CheckPrefix(*prefix); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	return nil
}

// CheckPrefix returns an error when prefix contains '{' or '}': a brace in
// the prefix would move the keys' hash tag, and their Cluster slot with it.
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("key prefix %q contains '{' or '}'", prefix)
	}
	return nil
}
