package rediskey

import "testing"

func TestCheckPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"", true},
		{"idemgate:", true},
		{"a:b:", true},
		{"{idemgate}:", false},
		{"a{", false},
		{"}", false},
	} {
		err := CheckPrefix(tc.prefix)
		if (err == nil) != tc.ok {
			t.Errorf("CheckPrefix(%q) = %v; want ok %v", tc.prefix, err, tc.ok)
		}
	}
	if got, want := CheckPrefix("a{").Error(), `key prefix "a{" contains '{' or '}'`; got != want {
		t.Errorf("error %q; want %q", got, want)
	}
}
