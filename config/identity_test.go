package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func jwtFile(c *Config) { c.Idempotency.Identity.JWT.JWKSFile = "/etc/idemgate/jwks.json" }

func TestValidateIdentityRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		key    string
		err    error
		also   string
	}{
		{"alias with identity", func(c *Config) {
			c.Idempotency.IdentityHeaders = []string{"Authorization"}
			c.Idempotency.Identity.Cookies = []string{"sid"}
		}, "idempotency.identity_headers", ErrConflict, "not both"},
		{"alias with identity jwt", func(c *Config) {
			c.Idempotency.IdentityHeaders = []string{"X-Api-Key"}
			jwtFile(c)
		}, "idempotency.identity_headers", ErrConflict, "not both"},
		{"require_identity, nothing", func(c *Config) {
			c.Idempotency.RequireIdentity = true
			c.Idempotency.Identity.Headers = []string{}
		}, "idempotency.require_identity", ErrConflict, "no source"},
		{"bad header", func(c *Config) { c.Idempotency.Identity.Headers = []string{"X Y"} }, "idempotency.identity.headers[0]", ErrInvalid, ""},
		{"bad cookie", func(c *Config) { c.Idempotency.Identity.Cookies = []string{"a=b"} }, "idempotency.identity.cookies[0]", ErrInvalid, ""},
		{"headers name the JWT's header", func(c *Config) {
			c.Idempotency.Identity.Headers = []string{"X-Tenant", "Authorization"}
			jwtFile(c)
		}, "idempotency.identity.headers[1]", ErrConflict, "raw token"},
		{"headers name the JWT's custom header", func(c *Config) {
			c.Idempotency.Identity.Headers = []string{"X-Id-Token"}
			c.Idempotency.Identity.JWT.Header = "X-Id-Token"
			jwtFile(c)
		}, "idempotency.identity.headers[0]", ErrConflict, "raw token"},
		{"cookies name the JWT's cookie", func(c *Config) {
			c.Idempotency.Identity.Cookies = []string{"at"}
			c.Idempotency.Identity.JWT.Cookie = "at"
			jwtFile(c)
		}, "idempotency.identity.cookies[0]", ErrConflict, "raw token"},
		{"jwt without keys", func(c *Config) { c.Idempotency.Identity.JWT.Issuers = []string{"https://idp"} }, "idempotency.identity.jwt", ErrRequired, "jwks_file"},
		{"jwt two key sources", func(c *Config) {
			jwtFile(c)
			c.Idempotency.Identity.JWT.JWKSURL = "https://idp.example/jwks"
		}, "idempotency.identity.jwt", ErrConflict, ""},
		{"jwt header and cookie", func(c *Config) {
			jwtFile(c)
			c.Idempotency.Identity.JWT.Header, c.Idempotency.Identity.JWT.Cookie = "X-T", "at"
		}, "idempotency.identity.jwt.cookie", ErrConflict, ""},
		{"jwt bad url", func(c *Config) { c.Idempotency.Identity.JWT.JWKSURL = "ftp://idp/jwks" }, "idempotency.identity.jwt.jwks_url", ErrInvalid, ""},
		{"jwt alg none", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Algorithms = []string{"RS256", "none"} }, "idempotency.identity.jwt.algorithms[1]", ErrInvalid, "never"},
		{"jwt alg unknown", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Algorithms = []string{"RS1"} }, "idempotency.identity.jwt.algorithms[0]", ErrInvalid, ""},
		{"jwt no algs", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Algorithms = []string{} }, "idempotency.identity.jwt.algorithms", ErrRequired, ""},
		{"jwt HS with jwks", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Algorithms = []string{"HS256"} }, "idempotency.identity.jwt.algorithms", ErrConflict, "hmac_secret_env"},
		{"hmac with default algs", func(c *Config) { c.Idempotency.Identity.JWT.HMACSecretEnv = "JWT_SECRET" }, "idempotency.identity.jwt.hmac_secret_env", ErrConflict, "HS256"},
		{"hmac with RS too", func(c *Config) {
			c.Idempotency.Identity.JWT.HMACSecretEnv = "JWT_SECRET"
			c.Idempotency.Identity.JWT.Algorithms = []string{"HS256", "RS256"}
		}, "idempotency.identity.jwt.algorithms", ErrConflict, ""},
		{"hmac env name", func(c *Config) {
			c.Idempotency.Identity.JWT.HMACSecretEnv = "1X"
			c.Idempotency.Identity.JWT.Algorithms = []string{"HS256"}
		}, "idempotency.identity.jwt.hmac_secret_env", ErrInvalid, ""},
		{"jwt no claims", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Claims = nil }, "idempotency.identity.jwt.claims", ErrRequired, ""},
		{"jwt empty claim", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Claims = []string{"sub", ""} }, "idempotency.identity.jwt.claims[1]", ErrRequired, ""},
		{"jwt negative leeway", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Leeway = -time.Second }, "idempotency.identity.jwt.leeway", ErrRange, ""},
		{"jwt empty issuer", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Issuers = []string{""} }, "idempotency.identity.jwt.issuers[0]", ErrRequired, ""},
		{"jwt empty audience", func(c *Config) { jwtFile(c); c.Idempotency.Identity.JWT.Audiences = []string{""} }, "idempotency.identity.jwt.audiences[0]", ErrRequired, ""},
		{"by unknown", func(c *Config) { c.Routes[0].RateLimit.By = "ip" }, "routes[0].rate_limit.by", ErrInvalid, ""},
		{"by bad header", func(c *Config) { c.Routes[0].RateLimit.By = "header:X Y" }, "routes[0].rate_limit.by", ErrInvalid, ""},
		{"by identity without jwt", func(c *Config) { c.Routes[0].RateLimit.By = "identity" }, "routes[0].rate_limit.by", ErrConflict, "verified"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			lines := errorLines(t, err)
			if !errors.Is(err, tt.err) {
				t.Errorf("error %q does not wrap %v", err, tt.err)
			}
			if len(lines) != 1 || !strings.HasPrefix(lines[0], tt.key+": ") || !strings.Contains(lines[0], tt.also) {
				t.Errorf("got %q; want one line starting %q containing %q", lines, tt.key+": ", tt.also)
			}
		})
	}
}

func TestValidateIdentityAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"alias", func(c *Config) { c.Idempotency.IdentityHeaders = []string{"Ucp-Agent"} }},
		{"alias empty, not required", func(c *Config) {
			c.Idempotency.IdentityHeaders = []string{}
			c.Idempotency.RequireIdentity = false
		}},
		{"cookies", func(c *Config) {
			c.Idempotency.Identity.Cookies = []string{"sid"}
			c.Idempotency.RequireIdentity = true
		}},
		{"jwt file", jwtFile},
		{"jwt url with headers and cookies", func(c *Config) {
			c.Idempotency.Identity.JWT.JWKSURL = "https://idp.example/.well-known/jwks.json"
			c.Idempotency.Identity.Headers = []string{"X-Tenant"}
			c.Idempotency.Identity.Cookies = []string{"sid"}
			c.Idempotency.Identity.JWT.Issuers = []string{"https://idp.example"}
			c.Idempotency.Identity.JWT.Audiences = []string{"shop"}
			c.Idempotency.RequireIdentity = true
		}},
		{"jwt cookie beside Authorization header", func(c *Config) {
			jwtFile(c)
			c.Idempotency.Identity.JWT.Cookie = "at"
			c.Idempotency.Identity.Headers = []string{"Authorization"}
		}},
		{"jwt hmac", func(c *Config) {
			c.Idempotency.Identity.JWT.HMACSecretEnv = "JWT_SECRET"
			c.Idempotency.Identity.JWT.Algorithms = []string{"HS256", "HS512"}
		}},
		{"jwt zero leeway, every asymmetric alg", func(c *Config) {
			jwtFile(c)
			c.Idempotency.Identity.JWT.Leeway = 0
			c.Idempotency.Identity.JWT.Algorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
		}},
		{"by identity with jwt", func(c *Config) { jwtFile(c); c.Routes[0].RateLimit.By = "identity" }},
		{"by header", func(c *Config) { c.Routes[0].RateLimit.By = "header:X-Api-Key" }},
		{"by client_ip", func(c *Config) { c.Routes[0].RateLimit.By = "client_ip" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v; want nil", err)
			}
		})
	}
}

func TestIdentitySources(t *testing.T) {
	t.Parallel()
	def := defaultJWT()
	tests := []struct {
		name string
		yaml string
		want Identity
	}{
		{"nothing: Authorization", "", Identity{Headers: []string{"Authorization"}, JWT: def}},
		{"empty identity: Authorization", "idempotency:\n  identity: {}\n", Identity{Headers: []string{"Authorization"}, JWT: def}},
		{"alias", "idempotency:\n  identity_headers: [ucp-agent]\n", Identity{Headers: []string{"Ucp-Agent"}, JWT: def}},
		{"alias empty: none", "idempotency:\n  identity_headers: []\n", Identity{Headers: []string{}, JWT: def}},
		{"headers empty: none", "idempotency:\n  identity:\n    headers: []\n", Identity{Headers: []string{}, JWT: def}},
		{"cookies replace the default", "idempotency:\n  identity:\n    cookies: [sid]\n", Identity{Cookies: []string{"sid"}, JWT: def}},
		{"jwt replaces the default", "idempotency:\n  identity:\n    jwt:\n      jwks_url: https://idp/jwks\n      header: x-id-token\n",
			Identity{JWT: JWT{Header: "X-Id-Token", JWKSURL: "https://idp/jwks", Claims: def.Claims, Algorithms: def.Algorithms, Leeway: def.Leeway}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Idempotency.IdentitySources(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("IdentitySources() = %#v; want %#v", got, tt.want)
			}
		})
	}
}

func TestIdentityFromEnv(t *testing.T) {
	t.Setenv("IDEMGATE_IDEMPOTENCY_IDENTITY_HEADERS", "ucp-agent")
	t.Setenv("IDEMGATE_IDEMPOTENCY_IDENTITY_JWT_JWKS_URL", "https://idp/jwks")
	t.Setenv("IDEMGATE_IDEMPOTENCY_IDENTITY_JWT_LEEWAY", "5s")
	c, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	id := c.Idempotency
	if id.IdentityHeaders != nil || !reflect.DeepEqual(id.Identity.Headers, []string{"Ucp-Agent"}) {
		t.Errorf("IDEMGATE_IDEMPOTENCY_IDENTITY_HEADERS set alias %v, identity.headers %v; want only identity.headers", id.IdentityHeaders, id.Identity.Headers)
	}
	if id.Identity.JWT.JWKSURL != "https://idp/jwks" || id.Identity.JWT.Leeway != 5*time.Second {
		t.Errorf("jwt = %+v", id.Identity.JWT)
	}
}

func TestExplainIdentity(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"default", func(*Config) {}, []string{"Authorization (the default", "refreshed", "require_identity: true", "400 idempotency_identity_missing"}},
		{"anonymous", func(c *Config) { c.Idempotency.RequireIdentity = false }, []string{"require_identity: false", "anonymous"}},
		{"cookies required", func(c *Config) {
			c.Idempotency.Identity.Cookies = []string{"sid"}
			c.Idempotency.RequireIdentity = true
		}, []string{"cookie(s) sid", "400 idempotency_identity_missing"}},
		{"jwt", func(c *Config) { jwtFile(c) }, []string{"verified claims iss, sub of the JWT in header Authorization"}},
		{"none", func(c *Config) { c.Idempotency.Identity.Headers = []string{} }, []string{"none configured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(c)
			text := strings.Join(c.Idempotency.ExplainIdentity(), "\n")
			for _, w := range tt.want {
				if !strings.Contains(text, w) {
					t.Errorf("ExplainIdentity() = %q; want it to contain %q", text, w)
				}
			}
			if tt.name == "jwt" && strings.Contains(text, "refreshed, and the retry") {
				t.Errorf("jwt identity warned about raw Authorization: %q", text)
			}
		})
	}
}
