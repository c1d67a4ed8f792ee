package canonform

import (
	"errors"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

func canon(t testing.TB, body string, ignore ...string) (string, bool) {
	t.Helper()
	var f Form
	_, ok, err := f.Parse([]byte(body), ignore, nil)
	if err != nil {
		t.Fatal(err)
	}
	return string(f.Append(nil)), ok
}

func TestIsForm(t *testing.T) {
	t.Parallel()
	for ct, want := range map[string]bool{
		"application/x-www-form-urlencoded":                  true,
		"Application/X-WWW-Form-URLEncoded":                  true,
		" application/x-www-form-urlencoded ; charset=utf-8": true,
		"application/x-www-form-urlencoded;charset=latin1":   true,
		"application/json":                                   false,
		"multipart/form-data":                                false,
		"application/x-www-form-urlencodedx":                 false,
		"":                                                   false,
	} {
		if got := IsForm(ct); got != want {
			t.Errorf("IsForm(%q) = %v; want %v", ct, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	base := "amount=100&currency=usd&metadata[order]=6735&items[]=a&items[]=b&note=a%40b+c"
	tests := []struct {
		name, body string
		ignore     []string
		same       bool
	}{
		{"identical", base, nil, true},
		{"distinct names reordered", "note=a%40b+c&items[]=a&currency=usd&items[]=b&amount=100&metadata[order]=6735", nil, true},
		{"percent-encoded", "amount=%31%30%30&currency=usd&metadata%5Border%5D=6735&items%5B%5D=a&items[]=b&note=a@b%20c", nil, true},
		{"lower-case hex", "amount=100&currency=usd&metadata%5border%5d=6735&items[]=a&items[]=b&note=a%40b+c", nil, true},
		{"empty pairs", "&&amount=100&&currency=usd&metadata[order]=6735&items[]=a&items[]=b&note=a%40b+c&", nil, true},
		{"ignored parameter", base + "&metadata[sent_at]=17", []string{"metadata[sent_at]"}, true},
		{"ignored parameter, encoded", base + "&metadata%5Bsent_at%5D=17", []string{"metadata[sent_at]"}, true},
		{"ignore names the literal name", base + "&metadata[sent_at]=17", []string{"metadata/sent_at"}, false},
		{"another value", "amount=101&currency=usd&metadata[order]=6735&items[]=a&items[]=b&note=a%40b+c", nil, false},
		{"order within a name", "amount=100&currency=usd&metadata[order]=6735&items[]=b&items[]=a&note=a%40b+c", nil, false},
		{"a parameter more", base + "&x=1", nil, false},
		{"a parameter fewer", "amount=100&currency=usd&metadata[order]=6735&items[]=a&items[]=b", nil, false},
		{"name case", "Amount=100&currency=usd&metadata[order]=6735&items[]=a&items[]=b&note=a%40b+c", nil, false},
		{"encoded separator", "amount=100%26currency%3Dusd&metadata[order]=6735&items[]=a&items[]=b&note=a%40b+c", nil, false},
	}
	want, ok := canon(t, base)
	if !ok {
		t.Fatal("base does not parse")
	}
	for _, tc := range tests {
		got, ok := canon(t, tc.body, tc.ignore...)
		if !ok {
			t.Errorf("%s: %q does not parse", tc.name, tc.body)
			continue
		}
		if (got == want) != tc.same {
			t.Errorf("%s: same = %v; want %v", tc.name, got == want, tc.same)
		}
	}

	// a equals a=; a length prefix keeps a=1%26b%3D2 from a=1&b=2.
	a, _ := canon(t, "a&b=1")
	b, _ := canon(t, "a=&b=1")
	if a != b {
		t.Errorf("a and a= differ")
	}
	a, _ = canon(t, "a=1%26b%3D2")
	b, _ = canon(t, "a=1&b=2")
	if a == b {
		t.Errorf("a=1%%26b%%3D2 equals a=1&b=2")
	}
	if got, _ := canon(t, "b=2&a=1"); got != "\x00\x00\x00\x01a\x00\x00\x00\x011\x00\x00\x00\x01b\x00\x00\x00\x012" {
		t.Errorf("encoding = %q", got)
	}
	if got, ok := canon(t, ""); !ok || got != "" {
		t.Errorf("empty body = %q, %v; want an empty form", got, ok)
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		"a=1;b=2",
		"a=1&b=%",
		"a=1&b=%4",
		"a=1&b=%zz",
		"a%G0=1",
		"a=%ff",
		"a=%c3%28",
		"a=\xff",
		"ignored=%zz",
	} {
		if _, ok := canon(t, body, "ignored"); ok {
			t.Errorf("%q parses; want it refused (hashed raw)", body)
		}
	}
}

func TestParseCharges(t *testing.T) {
	t.Parallel()
	body := []byte("a=1&&b=2&c")
	var f Form
	var got int64
	charged, ok, err := f.Parse(body, nil, func(n int64) error { got += n; return nil })
	if err != nil || !ok || charged != got || charged != WorkingMemory(len(body), 3) {
		t.Fatalf("Parse charged %d (reported %d), %v, %v; want %d", got, charged, ok, err, WorkingMemory(len(body), 3))
	}
	refused := errors.New("over")
	var g Form
	charged, ok, err = g.Parse(body, nil, func(int64) error { return refused })
	if !errors.Is(err, refused) || ok || charged != 0 {
		t.Errorf("refused charge: %d, %v, %v; want 0, false, the charge's error", charged, ok, err)
	}
}

// FuzzParse: reordering distinct names or re-encoding never changes the
// encoding; changing a value or the order within one name always does.
// Whatever parses, net/url parses to the same pairs.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"a=1&b=2", "items[]=a&items[]=b&x=%40", "a&a=&b=+", "a=1;b", "%zz", "metadata[k]=v&amount=100&currency=usd"} {
		f.Add(s, uint64(1))
	}
	f.Fuzz(func(t *testing.T, body string, seed uint64) {
		want, ok := canon(t, body)
		q, err := url.ParseQuery(body)
		if !ok {
			if err == nil && validUTF8(q) && !strings.Contains(body, ";") {
				t.Fatalf("%q: refused, but net/url parses it", body)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q: parses, but net/url refuses it: %v", body, err)
		}
		// The pairs, in order, as net/url sees them.
		type pair struct{ name, value string }
		var pairs []pair
		names := map[string][]string{}
		var order []string
		for _, p := range strings.Split(body, "&") {
			if p == "" {
				continue
			}
			n, v, _ := strings.Cut(p, "=")
			n, _ = url.QueryUnescape(n)
			v, _ = url.QueryUnescape(v)
			pairs = append(pairs, pair{n, v})
			if _, seen := names[n]; !seen {
				order = append(order, n)
			}
			names[n] = append(names[n], v)
		}
		for n, vs := range q {
			if strings.Join(vs, "\x00") != strings.Join(names[n], "\x00") {
				t.Fatalf("%q: name %q has %q; net/url says %q", body, n, names[n], vs)
			}
		}
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		enc := func(s string) string {
			var b strings.Builder
			for i := 0; i < len(s); i++ {
				c := s[i]
				switch {
				case c == ' ' && rng.IntN(2) == 0:
					b.WriteByte('+')
				case c != '&' && c != '=' && c != '%' && c != '+' && c != ';' && c != ' ' && rng.IntN(2) == 0:
					b.WriteByte(c)
				default:
					const hex = "0123456789ABCDEF0123456789abcdef"
					off := 16 * rng.IntN(2)
					b.WriteByte('%')
					b.WriteByte(hex[off+int(c>>4)])
					b.WriteByte(hex[off+int(c&15)])
				}
			}
			return b.String()
		}
		build := func(names []string, vals map[string][]string) string {
			// Interleave the names' pairs at random, each name's in order.
			next := map[string]int{}
			left := 0
			for _, n := range names {
				left += len(vals[n])
			}
			var parts []string
			for ; left > 0; left-- {
				var open []string
				for _, n := range names {
					if next[n] < len(vals[n]) {
						open = append(open, n)
					}
				}
				n := open[rng.IntN(len(open))]
				parts = append(parts, enc(n)+"="+enc(vals[n][next[n]]))
				next[n]++
				if rng.IntN(4) == 0 {
					parts = append(parts, "")
				}
			}
			return strings.Join(parts, "&")
		}
		shuffled := append([]string(nil), order...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		same := build(shuffled, names)
		if got, ok := canon(t, same); !ok || got != want {
			t.Fatalf("%q and %q: reordered distinct names or re-encoded, but another form (ok %v)", body, same, ok)
		}
		if len(pairs) == 0 {
			return
		}
		n := pairs[rng.IntN(len(pairs))].name
		changed := map[string][]string{}
		for k, v := range names {
			changed[k] = v
		}
		vs := append([]string(nil), names[n]...)
		i := rng.IntN(len(vs))
		vs[i] += "x"
		changed[n] = vs
		if got, ok := canon(t, build(shuffled, changed)); !ok || got == want {
			t.Fatalf("%q: value %d of %q changed, but the same form (ok %v)", body, i, n, ok)
		}
		for k, vs := range names {
			for j := 1; j < len(vs); j++ {
				if vs[j] == vs[0] {
					continue
				}
				swapped := append([]string(nil), vs...)
				swapped[0], swapped[j] = swapped[j], swapped[0]
				changed[n] = names[n]
				changed[k] = swapped
				if got, ok := canon(t, build(shuffled, changed)); !ok || got == want {
					t.Fatalf("%q: values of %q reordered, but the same form (ok %v)", body, k, ok)
				}
				return
			}
		}
	})
}

func validUTF8(q url.Values) bool {
	for n, vs := range q {
		if !utf8.ValidString(n) {
			return false
		}
		for _, v := range vs {
			if !utf8.ValidString(v) {
				return false
			}
		}
	}
	return true
}
