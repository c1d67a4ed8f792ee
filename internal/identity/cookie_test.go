package identity

import (
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/limiter"
)

func readAll(lines []string, name string) ([]string, error) {
	var got []string
	err := cookieValues(lines, name, func(v string) { got = append(got, v) })
	return got, err
}

// TestCookieValues: the family of spellings of a Cookie header. Every value
// is read byte for byte (net/http drops the ones marked "dropped"); a value
// whose end or a name that upstreams read differently is unreadable.
func TestCookieValues(t *testing.T) {
	t.Parallel()
	many := strings.Repeat("a=1;", 3000) + "sid=alice"
	tests := []struct {
		name    string
		lines   []string
		want    []string
		invalid bool
	}{
		{"plain", []string{"sid=alice"}, []string{"alice"}, false},
		{"among others", []string{"a=1; sid=alice; b=2"}, []string{"alice"}, false},
		{"absent", []string{"a=1; b=2"}, nil, false},
		{"no header", nil, nil, false},
		{"dropped: JSON", []string{`sid={"u":1}`}, []string{`{"u":1}`}, false},
		{"dropped: JSON among others", []string{`a=1; sid={"u":1}; b=2`}, []string{`{"u":1}`}, false},
		{"dropped: backslash", []string{`sid=a\b`}, []string{`a\b`}, false},
		{"dropped: non-ASCII", []string{"sid=élan"}, []string{"élan"}, false},
		{"dropped: non-UTF-8", []string{"sid=\xff\xfe"}, []string{"\xff\xfe"}, false},
		{"dropped: inner space", []string{"sid=a b"}, []string{"a b"}, false},
		{"dropped: comma", []string{"sid=a,b"}, []string{"a,b"}, false},
		{"dropped: quote inside", []string{`sid=a"b`}, []string{`a"b`}, false},
		{"dropped: more than 3000 cookies", []string{many}, []string{"alice"}, false},
		{"dropped: space before =", []string{"sid =alice"}, []string{"alice"}, false},
		{"quoted", []string{`sid="alice"`}, []string{"alice"}, false},
		{"quoted empty", []string{`sid=""`}, []string{""}, false},
		{"quoted with space", []string{`sid="a b"`}, []string{"a b"}, false},
		{"space after =", []string{"sid= alice"}, []string{" alice"}, false},
		{"surrounding white space", []string{" \t sid=alice \t ;b=2"}, []string{"alice"}, false},
		{"empty value", []string{"sid=; b=2"}, []string{""}, false},
		{"no =", []string{"sid; b=2"}, []string{""}, false},
		{"= in value", []string{"sid=a=b"}, []string{"a=b"}, false},
		{"empty pairs", []string{";;sid=alice;;"}, []string{"alice"}, false},
		{"duplicates in order", []string{"sid=a; sid=b"}, []string{"a", "b"}, false},
		{"several lines in order", []string{"sid=a", "x=1", `sid={"u":2}`}, []string{"a", `{"u":2}`}, false},
		{"other names", []string{"sidx=1; xsid=2; si=3"}, nil, false},
		{"unreadable: ; inside quotes", []string{`sid="a;b"`}, nil, true},
		{"unreadable: unterminated quote", []string{`sid="alice`}, nil, true},
		{"unreadable: lone quote", []string{`sid="`}, nil, true},
		{"unreadable: escaped quote", []string{`sid="a\"b"`}, nil, true},
		{"unreadable: quote then text", []string{`sid="a"b`}, nil, true},
		{"unreadable: other case", []string{"SID=alice"}, nil, true},
		{"unreadable: percent-encoded name", []string{"%73id=alice"}, nil, true},
		{"unreadable: after a readable one", []string{"sid=a", "Sid=b"}, nil, true},
		{"unreadable: dot for underscore", []string{"s.id=alice"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			name := "sid"
			if strings.Contains(tt.name, "underscore") {
				name = "s_id"
			}
			got, err := readAll(tt.lines, name)
			if tt.invalid {
				if !errors.Is(err, ErrUnreadable) {
					t.Fatalf("got %q, %v; want ErrUnreadable", got, err)
				}
				if strings.Contains(err.Error(), "alice") {
					t.Errorf("the error %q names the value", err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// goValues are the values net/http reads for name.
func goValues(lines []string, name string) []string {
	var out []string
	for _, c := range (&http.Request{Header: http.Header{"Cookie": lines}}).CookiesNamed(name) {
		out = append(out, c.Value)
	}
	return out
}

// FuzzCookieValues: the raw reader never panics; it reads every value
// net/http reads, the same and in the same order (a subsequence: the reader
// also reads what net/http drops); and a pair whose value holds no ";" and
// does not start with a quote is read back byte for byte, wherever it sits.
func FuzzCookieValues(f *testing.F) {
	for _, s := range []string{
		"sid=alice", `sid={"u":1}`, `sid="a;b"`, "a=1; sid=b; sid=c", "sid=\xff", `sid="x"`, "SID=1",
		"%73id=1", " sid = a ", "sid", ";;", `sid="`, "sid=a\tb",
	} {
		f.Add(s, "x=1", "a b")
	}
	f.Fuzz(func(t *testing.T, line, other, v string) {
		lines := []string{line, other}
		got, err := readAll(lines, "sid")
		if err == nil {
			want := goValues(lines, "sid")
			i := 0
			for _, g := range got {
				if i < len(want) && g == want[i] {
					i++
				}
			}
			if i != len(want) {
				t.Fatalf("lines %q: read %q; net/http reads %q, not a subsequence", lines, got, want)
			}
		} else if !errors.Is(err, ErrUnreadable) {
			t.Fatalf("error %v does not wrap ErrUnreadable", err)
		}
		// Round trip of a value a lenient framework reads as sent.
		v = strings.Trim(v, " \t\r\n")
		if strings.ContainsAny(v, ";") || strings.HasPrefix(v, `"`) {
			return
		}
		for _, l := range [][]string{{"sid=" + v}, {"a=1; sid=" + v + "; b=2"}, {"a=1", "sid=" + v}} {
			got, err := readAll(l, "sid")
			if err != nil || len(got) != 1 || got[0] != v {
				t.Fatalf("lines %q: read %q, %v; want [%q]", l, got, err, v)
			}
		}
	})
}

// TestFoldsTo: the names lenient frameworks read as "s_id".
func TestFoldsTo(t *testing.T) {
	t.Parallel()
	for n, want := range map[string]bool{
		"s_id": true, "S_ID": true, "s.id": true, "s id": true, "%73_id": true, "s%5Fid": true, "s%5fid": true,
		"s_i": false, "s_idx": false, "sid": false, "%7": false, "s%2": false, "": false, "s_i%": false,
	} {
		if got := foldsTo(n, "s_id"); got != want {
			t.Errorf("foldsTo(%q) = %v; want %v", n, got, want)
		}
	}
}

// TestResolveCookies: Resolve, the route limit's identity and the admin
// look-up read cookies by one rule. A value net/http drops is part of the
// identity; an unreadable cookie (the identity's or the JWT's) makes the
// result Unreadable, never a smaller identity, and fails the look-up; a
// JWT cookie that is read but does not verify stays Invalid.
func TestResolveCookies(t *testing.T) {
	t.Parallel()
	r, err := New(Options{Headers: []string{"X-Shop"}, Cookies: []string{"sid"}})
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(cookies ...string) Result {
		h := http.Header{"X-Shop": {"s1"}}
		if len(cookies) > 0 {
			h["Cookie"] = cookies
		}
		return r.Resolve(&http.Request{Header: h})
	}
	none := resolve()
	for _, c := range []string{`sid={"u":1}`, `sid=a\b`, "sid=\xff", "sid=a b"} {
		got := resolve(c)
		if got.Status != Present || got.Sum() == none.Sum() {
			t.Errorf("Cookie %q: %v, same sum as no cookie: %v", c, got.Status, got.Sum() == none.Sum())
		}
		look, err := r.Lookup(http.Header{"X-Shop": {"s1"}, "Cookie": {c}}, nil)
		if err != nil || look.Sum() != got.Sum() {
			t.Errorf("Cookie %q: Lookup = %v; want Resolve's sum", c, err)
		}
	}
	// Values net/http reads keep their sums: a quoted value is its content.
	if resolve(`sid="abc"`).Sum() != resolve("sid=abc").Sum() {
		t.Errorf(`sid="abc" and sid=abc differ`)
	}
	if resolve("sid=a", "sid=b").Sum() != resolve("sid=a; sid=b").Sum() {
		t.Errorf("two Cookie lines differ from one")
	}
	for _, c := range []string{`sid="a;b"`, "SID=x"} {
		got := resolve(c)
		if got.Status != Unreadable || !errors.Is(got.Err, ErrUnreadable) || got.Verified {
			t.Errorf("Cookie %q: %v %v; want Unreadable", c, got.Status, got.Err)
		}
		if k, per := ByIdentity.KeyFor(http.Header{}, got, limiter.Bucket(netip.MustParseAddr("192.0.2.1"))); !per {
			t.Errorf("Cookie %q: counted by identity %x; want per address", c, k)
		}
		if _, err := r.Lookup(http.Header{"Cookie": {c}}, nil); !errors.Is(err, ErrUnreadable) {
			t.Errorf("Cookie %q: Lookup = %v; want ErrUnreadable", c, err)
		}
	}

	j, err := New(Options{JWT: &JWTOptions{Cookie: "tok", HMACSecret: []byte("0123456789abcdef0123456789abcdef"), Algorithms: []string{"HS256"}}})
	if err != nil {
		t.Fatal(err)
	}
	for c, want := range map[string]Status{
		`tok={"alg":"none"}`: Invalid,
		`tok="e30.e30.e30`:   Unreadable,
		"Tok=e30.e30.e30":    Unreadable,
		"tok=a; tok=b":       Invalid,
		"other=1":            Empty,
	} {
		if got := j.Resolve(&http.Request{Header: http.Header{"Cookie": {c}}}); got.Status != want {
			t.Errorf("JWT cookie %q: %v (%v); want %v", c, got.Status, got.Err, want)
		}
	}
}
