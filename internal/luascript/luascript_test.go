package luascript

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
	"testing/fstest"
)

func TestNew(t *testing.T) {
	files := fstest.MapFS{
		"lua/prelude.lua": {Data: []byte("local OK = 1 -- OK\n")},
		"lua/get.lua":     {Data: []byte("return OK\n")},
	}
	src := "local OK = 1 -- OK\nreturn OK\n"
	sum := sha1.Sum([]byte(src))
	if got, want := New(files, "get").Hash(), hex.EncodeToString(sum[:]); got != want {
		t.Errorf("New(get).Hash() = %s; want %s, the hash of prelude.lua + get.lua", got, want)
	}
}

func TestNewMissing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
	}{
		{"no script", fstest.MapFS{"lua/prelude.lua": {Data: []byte("--\n")}}},
		{"no prelude", fstest.MapFS{"lua/get.lua": {Data: []byte("return 1\n")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New did not panic")
				}
			}()
			New(tc.files, "get")
		})
	}
}
