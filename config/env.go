package config

import (
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Warning is a problem that does not stop idemgate, such as an IDEMGATE_*
// variable that no key reads.
type Warning struct {
	// Name is what the warning is about, such as the variable's name.
	Name string
	// Msg says what is wrong, in words for the operator.
	Msg string
}

// String returns "Name: Msg".
func (w Warning) String() string { return w.Name + ": " + w.Msg }

// OtherEnv lists the IDEMGATE_* variables that idemgate reads that are not
// config keys: secrets, and the test suites' settings.
var OtherEnv = []string{
	EnvPrefix + "_ADMIN_TOKEN",     // the admin API's bearer token
	EnvPrefix + "_BIN",             // tests: a built idemgate binary
	EnvPrefix + "_REQUIRE_REDIS",   // tests: fail instead of skipping without Redis
	EnvPrefix + "_REQUIRE_BROWSER", // admin/console/browsertest: fail instead of skipping without Chromium
	EnvPrefix + "_CHROMIUM",        // scripts/chromium.sh: a Chromium to use
	EnvPrefix + "_CHROMIUM_DEBS",   // scripts/chromium.sh: where Debian's package is unpacked
	EnvPrefix + "_ARTIFACTS",       // admin/console/browsertest: where screenshots go
	EnvPrefix + "_REDIS_TEST_PORT", // scripts/redis-test.sh: the first port
	EnvPrefix + "_REDIS_DEBS",      // scripts/redis-test.sh: where Debian's packages are unpacked
	EnvPrefix + "_ANYONCE_VECTORS", // make test-ietf: the IETF draft's conformance vectors
	EnvPrefix + "_TEST_REDIS_ADDR", // tests: the Redis servers
	EnvPrefix + "_TEST_REDIS_CLUSTER_ADDRS",
	EnvPrefix + "_TEST_REDIS_SENTINEL_ADDRS",
	EnvPrefix + "_TEST_REDIS_SENTINEL_MASTER",
	EnvPrefix + "_LOCK_HELPER", // session/redislock tests: the helper process
	EnvPrefix + "_LOCK_HELPER_ADDR",
	EnvPrefix + "_LOCK_HELPER_PREFIX",
	EnvPrefix + "_LOCK_HELPER_LEASE",
}

// serviceLink matches the variables Kubernetes injects for a Service whose
// name starts with "idemgate" (enableServiceLinks): IDEMGATE_PORT,
// IDEMGATE_SERVICE_HOST, IDEMGATE_REDIS_PORT_6379_TCP_ADDR, ...
var serviceLink = regexp.MustCompile(`^` + EnvPrefix + `(_[A-Z0-9_]+)?_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(ADDR|PORT|PROTO))?)?)$`)

// UnknownEnv returns a warning, sorted by name, for each IDEMGATE_* variable
// in environ ("NAME=value" entries, as [os.Environ] returns) that idemgate
// does not read, naming the nearest variable it does read. Read are: every
// config key's variable (see [EnvNames]), the variables that c's *_env keys
// name (c may be nil), and [OtherEnv]. Variables that Kubernetes injects for
// Services whose names start with idemgate (IDEMGATE_PORT,
// IDEMGATE_SERVICE_HOST, IDEMGATE_REDIS_PORT_6379_TCP) are not
// warned about. Unknown variables are ignored by [Parse]: this only tells.
func UnknownEnv(environ []string, c *Config) []Warning {
	known := map[string]bool{}
	names := EnvNames()
	for _, n := range names {
		known[n] = true
	}
	for _, n := range OtherEnv {
		known[n] = true
	}
	if c != nil {
		for _, n := range envRefs(reflect.ValueOf(c).Elem()) {
			known[n] = true
		}
	}
	var out []Warning
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, EnvPrefix+"_") || known[name] || serviceLink.MatchString(name) {
			continue
		}
		msg := "no config key or setting reads this variable; it is ignored"
		if n := nearestName(name, names); n != "" {
			msg += "; did you mean " + n + "?"
		}
		out = append(out, Warning{Name: name, Msg: msg})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return slices.CompactFunc(out, func(a, b Warning) bool { return a.Name == b.Name })
}

// EnvNames returns the environment variable of every config key that can be
// set from the environment (every key but routes), sorted: IDEMGATE_LISTEN,
// IDEMGATE_STORE_REDIS_PASSWORD, ...
func EnvNames() []string {
	return slices.Sorted(maps.Keys(envKeyNames()))
}

// envRefs returns the values of the string fields whose key ends in "_env"
// (such as idempotency.encryption_key_env): variables the config names.
func envRefs(v reflect.Value) []string {
	var out []string
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if strings.HasSuffix(f.Tag.Get("mapstructure"), "_env") && f.Type.Kind() == reflect.String {
				if s := v.Field(i).String(); s != "" {
					out = append(out, s)
				}
				continue
			}
			out = append(out, envRefs(v.Field(i))...)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			out = envRefs(v.Elem())
		}
	case reflect.Slice:
		for i := range v.Len() {
			out = append(out, envRefs(v.Index(i))...)
		}
	}
	return out
}

// nearestName returns the name among names that name most likely misspells:
// the one ending in name's words after the prefix (IDEMGATE_REDIS_PASSWORD →
// IDEMGATE_STORE_REDIS_PASSWORD) if only one does, else the nearest by
// [nearestKey]'s rule on those words.
func nearestName(name string, names []string) string {
	tail := "_" + strings.TrimPrefix(name, EnvPrefix+"_")
	var suffixed []string
	tails := make([]string, len(names))
	for i, n := range names {
		if strings.HasSuffix(n, tail) {
			suffixed = append(suffixed, n)
		}
		tails[i] = "_" + strings.TrimPrefix(n, EnvPrefix+"_")
	}
	if len(suffixed) == 1 {
		return suffixed[0]
	}
	if t := nearestKey(tail, tails); t != "" {
		return EnvPrefix + t
	}
	return ""
}

// nearestKey returns the name among names that name most likely misspells,
// for the did-you-mean of an unknown config key or environment variable:
// one that differs only in case, else the nearest by edit distance if
// within a third of name's length, else "".
func nearestKey(name string, names []string) string {
	best, bestD := "", max(1, len(name)/3)+1
	for _, n := range names {
		if strings.EqualFold(n, name) {
			return n
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b,
// in bytes: the Levenshtein distance with a swap of two adjacent bytes
// counted as one edit (POTS is one edit from POST).
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
