package app

import (
	"context"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/redis/go-redis/v9"
)

// store.redis.sentinel_username and sentinel_password reach the sentinels,
// and username and password the master, each only its own: against a real
// redis-sentinel that requires auth (a password for its default user, and
// an ACL user of its own) monitoring a master with a password of its own,
// the client finds and uses the master with either sentinel credential,
// and not without one, with a wrong one, or with the master's password
// alone.
func TestRedisSentinelCredentials(t *testing.T) {
	master := redistest.StartOwn(t)
	const masterPassword = "master-secret"
	setup := master.Client()
	err := setup.ConfigSet(t.Context(), "requirepass", masterPassword).Err()
	setup.Close()
	if err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: master.Addr, Password: masterPassword})
	defer direct.Close()
	auth := redistest.SentinelAuth{Password: "sentinel-secret", User: "idemgate-sentinel", UserPassword: "user-secret"}
	sentinel := redistest.StartOwnSentinel(t, master.Addr, "own-master", auth)
	for _, tc := range []struct {
		name           string
		user, password string
		ok             bool
	}{
		{"wrong password", "", "not-it", false},
		{"the master's password alone", "", "", false},
		{"password of the default user", "", auth.Password, true},
		{"ACL user", auth.User, auth.UserPassword, true},
		{"ACL user, the default user's password", auth.User, auth.Password, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := config.Redis{Addrs: []string{sentinel}, MasterName: "own-master", Password: masterPassword,
				SentinelUsername: tc.user, SentinelPassword: tc.password}
			var cs closeStack
			defer cs.close()
			client, err := newRedisClient(rc, redisstore.NewTimeout(time.Second), &cs)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			key := redistest.Prefix(t) + "sentinel"
			err = client.Set(ctx, key, tc.name, time.Minute).Err()
			if (err == nil) != tc.ok {
				t.Fatalf("SET through the sentinel: %v; want ok %t", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			if got, err := direct.Get(ctx, key).Result(); err != nil || got != tc.name {
				t.Errorf("the master holds %q, %v; want %q", got, err, tc.name)
			}
		})
	}
}
