package app

import (
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/identity"
)

// newIdentity builds the resolver of cfg's identity sources
// (idempotency.identity, or the identity_headers alias, or the default
// Authorization header) and pushes its Close onto cs: a JWK Set URL's
// fetches stop with it. hmac_secret_env is read from the environment here;
// an unset or empty variable is an error.
func newIdentity(cfg *config.Config, now func() time.Time, log *slog.Logger, cs *closeStack) (*identity.Resolver, error) {
	src := cfg.Idempotency.IdentitySources()
	o := identity.Options{
		Headers: src.Headers,
		Cookies: src.Cookies,
		Now:     now,
		Logger:  log.With("component", "identity"),
	}
	if j := src.JWT; j.Enabled() {
		jo := &identity.JWTOptions{
			Header:     j.Header,
			Cookie:     j.Cookie,
			Claims:     j.Claims,
			JWKSFile:   j.JWKSFile,
			JWKSURL:    j.JWKSURL,
			Issuers:    j.Issuers,
			Audiences:  j.Audiences,
			Algorithms: j.Algorithms,
			Leeway:     j.Leeway,
		}
		if j.HMACSecretEnv != "" {
			secret := os.Getenv(j.HMACSecretEnv)
			if secret == "" {
				return nil, fmt.Errorf("idempotency.identity.jwt.hmac_secret_env: the environment variable %s is not set", j.HMACSecretEnv)
			}
			jo.HMACSecret = []byte(secret)
		}
		o.JWT = jo
	}
	r, err := identity.New(o)
	if err != nil {
		return nil, fmt.Errorf("idempotency.identity: %w", err)
	}
	cs.push(r.Close)
	return r, nil
}

// identityChanged reports whether the identity must be rebuilt: its
// sources changed. (A JWK Set file's content is the resolver's to watch.)
func identityChanged(old, next *config.Config) bool {
	return !reflect.DeepEqual(old.Idempotency.IdentitySources(), next.Idempotency.IdentitySources())
}
