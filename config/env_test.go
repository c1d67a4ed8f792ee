package config

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

func TestUnknownEnv(t *testing.T) {
	t.Parallel()
	withKeyEnv := Default()
	withKeyEnv.Idempotency.EncryptionKeyEnv = "IDEMGATE_SEAL_KEY"
	tests := []struct {
		name    string
		environ []string
		c       *Config
		want    []string // warnings, as String returns them
	}{
		{"typo", []string{"IDEMGATE_UPSTREM_URL=http://x"}, nil,
			[]string{"IDEMGATE_UPSTREM_URL: no config key or setting reads this variable; it is ignored; did you mean IDEMGATE_UPSTREAM_URL?"}},
		{"missing section", []string{"IDEMGATE_REDIS_PASSWORD=x"}, nil,
			[]string{"IDEMGATE_REDIS_PASSWORD: no config key or setting reads this variable; it is ignored; did you mean IDEMGATE_STORE_REDIS_PASSWORD?"}},
		{"nothing near", []string{"IDEMGATE_FROBNICATE_EVERYTHING=1"}, nil,
			[]string{"IDEMGATE_FROBNICATE_EVERYTHING: no config key or setting reads this variable; it is ignored"}},
		{"keys", []string{"IDEMGATE_UPSTREAM_URL=http://x", "IDEMGATE_STORE_REDIS_ADDRS=a:1,b:2", "IDEMGATE_IDEMPOTENCY_REPLAY_HEADER=", "IDEMGATE_LIMITER_IETF_HEADERS=true"}, nil, nil},
		{"secrets and test settings", []string{"IDEMGATE_ADMIN_TOKEN=t", "IDEMGATE_REQUIRE_REDIS=1", "IDEMGATE_TEST_REDIS_ADDR=127.0.0.1:1", "IDEMGATE_BIN=/x"}, nil, nil},
		{"kubernetes service links", []string{
			"IDEMGATE_PORT=tcp://10.0.0.1:8080", "IDEMGATE_SERVICE_HOST=10.0.0.1", "IDEMGATE_SERVICE_PORT=8080",
			"IDEMGATE_SERVICE_PORT_HTTP=8080", "IDEMGATE_PORT_8080_TCP=tcp://10.0.0.1:8080", "IDEMGATE_PORT_8080_TCP_ADDR=10.0.0.1",
			"IDEMGATE_PORT_8080_TCP_PORT=8080", "IDEMGATE_PORT_8080_TCP_PROTO=tcp",
			"IDEMGATE_ADMIN_SERVICE_HOST=10.0.0.2", "IDEMGATE_REDIS_PORT_6379_TCP_ADDR=10.0.0.3",
		}, nil, nil},
		{"a variable an _env key names", []string{"IDEMGATE_SEAL_KEY=abc"}, withKeyEnv, nil},
		{"the same without the config", []string{"IDEMGATE_SEAL_KEY=abc"}, nil,
			[]string{"IDEMGATE_SEAL_KEY: no config key or setting reads this variable; it is ignored"}},
		{"other prefixes", []string{"IDEMGATEWAY=1", "PATH=/bin", "idemgate_upstream_url=x", "IDEMGATE="}, nil, nil},
		{"sorted, once each", []string{"IDEMGATE_ZZZ_UNKNOWN=1", "IDEMGATE_LISTN=:1", "IDEMGATE_LISTN=:2"}, nil, []string{
			"IDEMGATE_LISTN: no config key or setting reads this variable; it is ignored; did you mean IDEMGATE_LISTEN?",
			"IDEMGATE_ZZZ_UNKNOWN: no config key or setting reads this variable; it is ignored",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, w := range UnknownEnv(tt.environ, tt.c) {
				got = append(got, w.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("UnknownEnv = %q; want %q", got, tt.want)
			}
		})
	}
}

// TestEnvNamesAreRead checks EnvNames against the keys the environment
// overrides (envKeys, from the decoder's point of view), so that no variable
// Parse reads is warned about.
func TestEnvNamesAreRead(t *testing.T) {
	t.Parallel()
	names := EnvNames()
	for name := range envKeys(t) {
		if !slices.Contains(names, name) {
			t.Errorf("EnvNames lacks %s", name)
		}
	}
	var environ []string
	for _, n := range names {
		environ = append(environ, n+"=x")
	}
	if w := UnknownEnv(environ, nil); len(w) != 0 {
		t.Errorf("UnknownEnv(every key) = %v; want none", w)
	}
}

func TestEditDistance(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"a", "", 1}, {"", "ab", 2}, {"kitten", "sitting", 3}, {"UPSTREM", "UPSTREAM", 1}, {"ab", "ba", 1}, {"POTS", "POST", 1}, {"ca", "abc", 3}} {
		if got := editDistance(tt.a, tt.b); got != tt.d {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tt.a, tt.b, got, tt.d)
		}
	}
}

// TestOtherEnvNamesTheScripts: every IDEMGATE_* variable the Makefile and
// scripts/ read is a config key's or on OtherEnv, so a test run with the
// scripts' variables exported never warns "unknown environment variable"
// (cmd/idemgate's TestDemo refuses any warning).
func TestOtherEnvNamesTheScripts(t *testing.T) {
	files, err := filepath.Glob("../scripts/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../Makefile", "../.ci/run")
	name := regexp.MustCompile(EnvPrefix + `_[A-Z0-9_]*[A-Z0-9]`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range name.FindAllString(string(data), -1) {
			if ws := UnknownEnv([]string{v + "=x"}, Default()); len(ws) > 0 {
				t.Errorf("%s reads %s, which UnknownEnv warns about: add it to OtherEnv", f, v)
			}
		}
	}
}
