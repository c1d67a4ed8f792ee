package rediskey

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestCheckPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"idemgate:", true},
		{"a:b:", true},
		{"{idemgate}:", false},
		{"a{", false},
		{"}", false},
	} {
		err := CheckPrefix(tc.prefix)
		if (err == nil) != tc.ok {
			t.Errorf("CheckPrefix(%q) = %v; want ok %v", tc.prefix, err, tc.ok)
		}
	}
}

func TestCheck(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, tc := range []struct {
		name    string
		client  redis.UniversalClient
		prefix  string
		want    string
		wantErr string
	}{
		{"default", c, "", DefaultPrefix, ""},
		{"own prefix", c, "app:", "app:", ""},
		{"brace", c, "{app}:", "", `pkg: key prefix "{app}:" contains '{' or '}'`},
		{"no client", nil, "app:", "", "pkg: nil client"},
		{"no client, brace", nil, "{", "", "pkg: nil client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.prefix
			err := Check("pkg", tc.client, &got)
			if err != nil {
				got = ""
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if got != tc.want || gotErr != tc.wantErr {
				t.Errorf("Check = %q, %q; want %q, %q", got, gotErr, tc.want, tc.wantErr)
			}
		})
	}
}

func TestReadTimeout(t *testing.T) {
	const def = 7 * time.Second
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   time.Duration
	}{
		{"client", redis.NewClient(&redis.Options{ReadTimeout: time.Second}), time.Second},
		{"client that never times out", redis.NewClient(&redis.Options{ReadTimeout: -1}), def},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{ReadTimeout: 2 * time.Second}), 2 * time.Second},
		{"ring", redis.NewRing(&redis.RingOptions{ReadTimeout: time.Second}), def},
	} {
		if got := ReadTimeout(tc.client, def); got != tc.want {
			t.Errorf("%s: %v; want %v", tc.name, got, tc.want)
		}
		tc.client.Close()
	}
}

func TestIsSubscribed(t *testing.T) {
	for m, want := range map[any]bool{
		&redis.Subscription{Kind: "subscribe", Channel: "c", Count: 1}: true,
		&redis.Subscription{Kind: "unsubscribe", Channel: "c"}:         false,
		&redis.Message{Channel: "c", Payload: "p"}:                     false,
		&redis.Pong{}: false,
	} {
		if got := IsSubscribed(m); got != want {
			t.Errorf("IsSubscribed(%#v) = %v; want %v", m, got, want)
		}
	}
	if IsSubscribed(nil) {
		t.Error("IsSubscribed(nil) = true")
	}
}
