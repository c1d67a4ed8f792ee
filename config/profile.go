package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/modes"
)

// Values of [Config.Profile] (DESIGN.md, Profiles).
const (
	ProfileDefault = "default"
	ProfileStripe  = "stripe"
	ProfileIETF    = "ietf"
)

// Where a key's effective value came from, as `idemgate config` says it.
const (
	SourceDefault = "default"
	SourceProfile = "profile"
	SourceFile    = "file"
	SourceEnv     = "env"
)

// A preset is one whole value a profile sets: key (as [ChangedKeys] names
// it) and the function that sets it on a Config.
type preset struct {
	key string
	set func(*Config)
}

// StripeErrorBody is the template of the stripe profile's errors: Stripe's
// error object, {"error": {"type", "code", "message", "request_id"}}.
// type is idempotency_error for the key's own conflicts (reused, in use,
// too large, outcome unknown), api_error for 5xx and invalid_request_error
// for every other 4xx, the types Stripe documents
// (https://docs.stripe.com/api/errors).
const StripeErrorBody = `{"error":{"type":` +
	`{{if or (eq .Code "idempotency_key_in_use") (eq .Code "idempotency_key_reused") (eq .Code "idempotency_response_too_large") (eq .Code "idempotency_outcome_unknown")}}"idempotency_error"` +
	`{{else if ge .Status 500}}"api_error"{{else}}"invalid_request_error"{{end}},` +
	`"code":{{json .Code}},"message":{{json .Detail}},"request_id":{{json .RequestID}}}}`

// IETFErrorBody is the template of the ietf profile's errors:
// application/problem+json with the titles and details of
// draft-ietf-httpapi-idempotency-key-header-07 §2.7 (Error Scenarios) for
// the three errors it names — a missing key (400), a concurrent request
// (409) and a reused key (422) — and idemgate's own for the others. Codes
// are the renamed ones (IETFCodes), carried in the "code" member the
// draft's public conformance vectors read.
const IETFErrorBody = `{"type":{{json (print "urn:idemgate:problem:" .Code)}},` +
	`{{if eq .Code "missing-key"}}"title":"Idempotency-Key is missing","detail":"This operation is idempotent and it requires correct usage of Idempotency Key."` +
	`{{else if eq .Code "conflict"}}"title":"A request is outstanding for this Idempotency-Key","detail":"A request with the same Idempotency-Key for the same operation is being processed or is outstanding."` +
	`{{else if eq .Code "fingerprint-mismatch"}}"title":"Idempotency-Key is already used","detail":"This operation is idempotent and it requires correct usage of Idempotency Key. Idempotency Key MUST not be reused across different payloads of this operation."` +
	`{{else}}"title":{{json .Title}},"detail":{{json .Detail}}{{end}},` +
	`"status":{{.Status}},"code":{{json .Code}},"request_id":{{json .RequestID}}}`

// IETFCodes renames, under the ietf profile, the codes of the errors the
// draft's public conformance vectors (sns45/anyonce, tier "profile") name
// by a code member: missing-key, invalid-key, conflict,
// fingerprint-mismatch, payload-too-large and store-unavailable.
var IETFCodes = map[string]string{
	"idempotency_key_missing": "missing-key",
	"idempotency_key_invalid": "invalid-key",
	"idempotency_in_progress": "conflict",
	"idempotency_key_reused":  "fingerprint-mismatch",
	"request_too_large":       "payload-too-large",
	"idempotency_unavailable": "store-unavailable",
}

// IETFReleaseStatuses are the ietf profile's release_statuses: only the
// answers that say the request was not carried out and may be sent again
// (a redirect, a timeout, too early, a rate limit, unavailable) release the
// key; every other answer, 4xx included, is the result of the completed
// operation that §2.6 says a retry gets.
var IETFReleaseStatuses = []int{307, 308, 408, 425, 429, 503}

// presets returns the whole values profile sets; nil for default (and for
// an unknown profile, which Validate refuses).
//
// stripe makes idemgate a drop-in for Stripe's own SDKs and SDKs written in
// their image. Stripe's public documentation, which the choices follow:
//   - https://docs.stripe.com/idempotency and
//     https://docs.stripe.com/api/idempotent_requests: keys of up to 255
//     characters; replays carry Idempotent-Replayed.
//   - https://docs.stripe.com/api/errors: the error object and its types
//     api_error, card_error, idempotency_error, invalid_request_error.
//   - https://docs.stripe.com/error-codes: the codes the SDKs know;
//     idempotency_key_in_use ("the idempotency key provided is currently
//     being used in another request") for a duplicate of a running request,
//     and rate_limit for a 429. Stripe names no public code for a key reused
//     with other parameters (its answer has type idempotency_error): idemgate
//     keeps idempotency_key_reused, as for a too-large answer and an unknown
//     outcome.
//
// Stripe-Account names the connected account a platform acts for, so it is
// part of the identity: one key used for two accounts must not return one
// account's object for the other. Stripe's SDKs read request ids from
// Request-Id.
//
// Stripe-Should-Retry (the header Stripe's SDKs obey before their own
// rules) is set by the proxy under this profile: false on key_reused,
// outcome_unknown and too_large, true on in_progress.
//
// ietf is draft-ietf-httpapi-idempotency-key-header-07 as written: the key
// is an sf-string (§2.1), a reused key gets 422 and a concurrent request
// 409 (§2.7), with the draft's problem titles (IETFErrorBody); and, where
// the draft is silent, what its public conformance vectors (sns45/anyonce)
// expect: replays marked Idempotency-Replayed, stored 4xx answers
// (IETFReleaseStatuses) and the vectors' problem codes (IETFCodes).
func presets(profile string) []preset {
	switch profile {
	case ProfileStripe:
		return []preset{
			{"idempotency.identity", func(c *Config) {
				c.Idempotency.Identity = Identity{Headers: []string{"Authorization", "Stripe-Account"}, JWT: defaultJWT()}
			}},
			{"idempotency.in_progress", func(c *Config) { c.Idempotency.InProgress = modes.InProgressWait }},
			{"idempotency.key_syntax", func(c *Config) { c.Idempotency.KeySyntax = modes.KeySyntaxPrintable }},
			{"idempotency.replay_header", func(c *Config) { c.Idempotency.ReplayHeader = "Idempotent-Replayed" }},
			{"request_id_header", func(c *Config) { c.RequestIDHeader = "Request-Id" }},
			{"errors", func(c *Config) {
				c.Errors = Errors{
					Codes:       map[string]string{"idempotency_in_progress": "idempotency_key_in_use", "rate_limited": "rate_limit"},
					ContentType: "application/json",
					Body:        StripeErrorBody,
				}
			}},
		}
	case ProfileIETF:
		return []preset{
			{"idempotency.key_syntax", func(c *Config) { c.Idempotency.KeySyntax = modes.KeySyntaxSFString }},
			{"idempotency.reuse_status", func(c *Config) { c.Idempotency.ReuseStatus = 422 }},
			{"idempotency.replay_header", func(c *Config) { c.Idempotency.ReplayHeader = "Idempotency-Replayed" }},
			{"idempotency.release_statuses", func(c *Config) { c.Idempotency.ReleaseStatuses = slices.Clone(IETFReleaseStatuses) }},
			{"errors", func(c *Config) {
				c.Errors = Errors{Codes: maps.Clone(IETFCodes), ContentType: "application/problem+json", Body: IETFErrorBody}
			}},
		}
	}
	return nil
}

// applyProfile sets on c the whole values of profile that set does not
// name: a key set explicitly (set reports true for it, or for a key below
// it) replaces the profile's value entirely. An explicit identity_headers
// (the old spelling of identity.headers) replaces the profile's identity.
func (c *Config) applyProfile(profile string, set func(key string) bool) {
	for _, p := range presets(profile) {
		if presetReplaced(p.key, set) {
			continue
		}
		p.set(c)
	}
}

// presetReplaced reports whether a key set explicitly (set reports true
// for it) replaces the preset of key: key itself or a key below it, or for
// the identity the old identity_headers spelling.
func presetReplaced(key string, set func(string) bool) bool {
	return set(key) || key == "idempotency.identity" && set("idempotency.identity_headers")
}

// ProfileChoices returns, once each, the keys c's profile set (those not
// set explicitly), as "key: value" lines for `idemgate validate`; none for
// the default profile.
func (c *Config) ProfileChoices(src func(key string) string) []string {
	var out []string
	for _, p := range presets(c.Profile) {
		if src != nil && src(p.key) != SourceProfile {
			continue
		}
		var probe Config
		p.set(&probe)
		out = append(out, fmt.Sprintf("%s: %s", p.key, describe(valueAt(reflect.ValueOf(&probe).Elem(), p.key))))
	}
	return out
}

// valueAt is the field of v (a Config) at key.
func valueAt(v reflect.Value, key string) reflect.Value {
	for part := range strings.SplitSeq(key, ".") {
		v = fieldByTag(v, part)
	}
	return v
}

// describe is a short rendering of a preset value.
func describe(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[Identity]() {
			return fmt.Sprintf("{headers: %v}", v.Interface().(Identity).Headers)
		}
		if v.Type() == reflect.TypeFor[Errors]() {
			e := v.Interface().(Errors)
			codes := slices.Sorted(maps.Keys(e.Codes))
			var rn []string
			for _, k := range codes {
				rn = append(rn, k+" → "+e.Codes[k])
			}
			return fmt.Sprintf("the profile's shape (%s%s)", e.ContentType, strings.Join(append([]string{""}, rn...), ", "))
		}
	}
	return fmt.Sprint(v.Interface())
}

// Sources tells where each key of c's effective value came from: a
// function of a key (as [ChangedKeys] names it, or any key below one) that
// returns [SourceEnv] when an IDEMGATE_* variable in environ sets it or a
// key below it, [SourceFile] when the YAML document data does, else
// [SourceProfile] when c's profile presets it (or a key above it) and
// neither replaced that preset, else
// [SourceDefault].
func (c *Config) Sources(data []byte, environ []string) (func(key string) string, error) {
	file, err := fileKeys(data)
	if err != nil {
		return nil, err
	}
	env := envSetKeys(environ)
	explicit := func(key string) bool { return hasKey(file, key) || hasKey(env, key) }
	profile := map[string]bool{}
	for _, p := range presets(c.Profile) {
		if !presetReplaced(p.key, explicit) {
			profile[p.key] = true
		}
	}
	return func(key string) string {
		switch {
		case hasKey(env, key):
			return SourceEnv
		case hasKey(file, key):
			return SourceFile
		case hasKey(profile, key):
			return SourceProfile
		}
		return SourceDefault
	}, nil
}

// hasKey reports whether keys holds key, a key below it, or a whole value
// above it (an entry whose value is true: a leaf of the document, a
// variable, or a profile's preset).
func hasKey(keys map[string]bool, key string) bool {
	for k, whole := range keys {
		if k == key || strings.HasPrefix(k, key+".") || whole && strings.HasPrefix(key, k+".") {
			return true
		}
	}
	return false
}

// fileKeys returns the dotted keys the YAML document data sets: sections
// (false) and whole values (true: leaves, and routes, tenant_hosts and
// errors.codes as one value each).
func fileKeys(data []byte) (map[string]bool, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := joinKey(prefix, n.Content[i].Value)
			v := n.Content[i+1]
			whole := v.Kind != yaml.MappingNode || k == "routes" || k == "idempotency.tenant_hosts" || k == "errors.codes"
			keys[k] = whole
			if !whole {
				walk(v, k)
			}
		}
	}
	if len(doc.Content) > 0 {
		walk(doc.Content[0], "")
	}
	return keys, nil
}

// envSetKeys returns the dotted keys that the IDEMGATE_* variables of environ
// set.
func envSetKeys(environ []string) map[string]bool {
	byName := envKeyNames()
	keys := map[string]bool{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if k, ok := byName[name]; ok {
			keys[k] = true
		}
	}
	return keys
}

// envKeyNames maps the environment variable of every config key that can
// be set from the environment (every key but routes) to its dotted key.
func envKeyNames() map[string]string {
	out := map[string]string{}
	var walk func(reflect.Type, string, string)
	walk = func(t reflect.Type, prefix, key string) {
		for f := range t.Fields() {
			tag := f.Tag.Get("mapstructure")
			if tag == "" || tag == "routes" {
				continue
			}
			name := prefix + keyDelim + strings.ToUpper(tag)
			if prefix == "" {
				name = strings.ToUpper(tag)
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, name, joinKey(key, tag))
				continue
			}
			// The variable viper reads for the key (envReplacer renames
			// the identity_headers alias's).
			out[EnvPrefix+"_"+envReplacer.Replace(name)] = joinKey(key, tag)
		}
	}
	walk(reflect.TypeFor[Config](), "", "")
	return out
}

// validateProfile checks profile, and under profile stripe that the
// identity names the Stripe-Account header unless allow_shared_accounts
// says a platform means to share one scope between its connected accounts.
func (c *Config) validateProfile(p *problems) {
	switch c.Profile {
	case ProfileDefault, ProfileIETF:
	case ProfileStripe:
		if c.Idempotency.AllowSharedAccounts {
			break
		}
		if !slices.Contains(c.Idempotency.IdentitySources().Headers, "Stripe-Account") {
			p.add("idempotency.identity", ErrConflict, "under profile stripe the identity must include the Stripe-Account header: a platform that sends one key for two connected accounts would get one account's answer for the other; add it, or set idempotency.allow_shared_accounts: true if that is meant")
		}
	default:
		p.add("profile", ErrInvalid, "%q: want %q, %q or %q", c.Profile, ProfileDefault, ProfileStripe, ProfileIETF)
	}
}
