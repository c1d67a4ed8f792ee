package rediskey

import (
	"testing"

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
