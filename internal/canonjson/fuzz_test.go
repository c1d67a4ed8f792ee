package canonjson_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
)

func FuzzAppend(f *testing.F) {
	for _, tc := range canonCases {
		f.Add([]byte(tc.in), "")
	}
	for _, tc := range invalidCases {
		f.Add([]byte(tc.in), "/a")
	}
	for _, tc := range ignoreCases {
		f.Add([]byte(tc.in), tc.ignore[0])
	}
	f.Add([]byte(strings.Repeat("[", canonjson.MaxDepth)+strings.Repeat("]", canonjson.MaxDepth)), "/0")
	f.Add([]byte(strings.Repeat("[", canonjson.MaxDepth+1)+strings.Repeat("]", canonjson.MaxDepth+1)), "")
	f.Add(body1K, "/meta/sent_at")
	f.Fuzz(func(t *testing.T, in []byte, ptr string) {
		var ignore []canonjson.Pointer
		var ignoreStr []string
		if p, err := canonjson.ParsePointer(ptr); err == nil {
			ignore, ignoreStr = []canonjson.Pointer{p}, []string{ptr}
		}
		const prefix = "dst:"
		out, ok := canonjson.Append([]byte(prefix), in, ignore)
		if !bytes.HasPrefix(out, []byte(prefix)) {
			t.Fatalf("Append(%q, %q) = %q; lost the dst prefix %q", prefix, in, out, prefix)
		}
		if !ok {
			if len(out) != len(prefix) {
				t.Fatalf("Append(%q, %q) = %q, false; want dst unchanged", prefix, in, out)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("Append(%q) ok = true; want false since json.Valid is false", in)
		}
		out = out[len(prefix):]
		if len(out) > len(in) {
			t.Errorf("Append(%q) = %q; longer than its input", in, out)
		}
		again, ok := canonjson.Append(nil, out, nil)
		if !ok || !bytes.Equal(again, out) {
			t.Fatalf("Append(%q) = %q, %v; want %q, true (idempotent)", out, again, ok, out)
		}
		checkSameValue(t, in, out, ignoreStr)
	})
}

func FuzzParsePointer(f *testing.F) {
	for _, s := range []string{"", "/", "//", "/a", "/meta/sent_at", "/items/0/ts", "/a~1b/m~0n", "/~01", "/~", "/~2", "a", "/\xff", "/01", "/-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := canonjson.ParsePointer(s)
		if err != nil {
			return
		}
		if p.String() != s {
			t.Fatalf("ParsePointer(%q).String() = %q; want %q", s, p.String(), s)
		}
		// Build the object the pointer names a path into; removing it must
		// leave the empty innermost object, wherever the tokens lead.
		toks := strings.Split(s[1:], "/")
		if len(toks) >= canonjson.MaxDepth {
			return
		}
		var doc, want strings.Builder
		for i, tok := range toks {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			name, _ := json.Marshal(tok)
			doc.WriteString("{" + string(name) + ":")
			if i < len(toks)-1 {
				want.WriteString("{" + string(name) + ":")
			}
		}
		doc.WriteString("1" + strings.Repeat("}", len(toks)))
		want.WriteString("{}" + strings.Repeat("}", len(toks)-1))
		got, ok := canonjson.Append(nil, []byte(doc.String()), []canonjson.Pointer{p})
		if !ok {
			t.Fatalf("Append(%q, %q) ok = false; want true", doc.String(), s)
		}
		// json.Marshal escapes <, > and & and so on; canonicalize the
		// expectation too rather than predict its escapes.
		wantCanon, ok := canonjson.Append(nil, []byte(want.String()), nil)
		if !ok || !bytes.Equal(got, wantCanon) {
			t.Errorf("Append(%q, %q) = %q; want %q", doc.String(), s, got, wantCanon)
		}
	})
}
