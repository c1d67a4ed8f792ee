// Package config loads, defaults and validates idemgate's configuration.
//
// The configuration is one YAML file (see DESIGN.md for every key). [Load]
// and [Parse] decode it over [Default], so an absent key keeps its default,
// and every scalar key can be overridden from the environment as
// IDEMGATE_SECTION_KEY (for example IDEMGATE_UPSTREAM_URL,
// IDEMGATE_STORE_REDIS_PASSWORD), whether or not the file mentions it. Lists
// of strings or numbers take a comma-separated value
// (IDEMGATE_STORE_REDIS_ADDRS=a:6379,b:6379). A variable that is set wins even
// when empty, so IDEMGATE_IDEMPOTENCY_REPLAY_HEADER= turns the replay header
// off. The routes list cannot be set from the environment.
//
// Decoding is strict: the file is first checked against [Config]'s keys
// (checkDocument), because viper folds the case of keys and decodes weakly.
// Keys are case-sensitive; an unknown key anywhere is an error naming it and
// the key it most likely misspells (the rule of [UnknownEnv]'s
// did-you-mean); a value must have its key's kind (a number or boolean is no
// string, a scalar no list, a map of routes no list of them); and a duration
// must be a string with a unit ("30s"): a bare number is refused rather than
// read as nanoseconds. A route's method must be in [RegisteredMethods] or in
// extra_methods. Decoding normalises what is
// case-insensitive: header names are canonicalised
// (net/textproto.CanonicalMIMEHeaderKey) and tenant_hosts keys are written
// in [NormalizeHost]'s form, except those that Validate must refuse (a port,
// or several keys for one host, which viper alone would silently merge).
//
// [Config.Validate] checks the decoded values and reports every problem at
// once, one line each, naming its key. Load and Parse do not call it;
// [Check] and [LoadChecked] do both and report the decoding problems and the
// semantic ones together, or a YAML syntax error alone with its line
// ([*SyntaxError]). Messages name a value that is the default as such
// ("idempotency.max_lease (1h, the default)").
//
// This package is idemgate's only user of viper; it never touches viper's
// global instance.
package config
