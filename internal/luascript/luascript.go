// Package luascript loads a package's Redis Lua scripts from the files it
// embeds: each script is the package's lua/prelude.lua (its reply codes and
// shared functions) followed by the script's own lua/NAME.lua, run with
// EVALSHA (go-redis falls back to EVAL when the server's script cache lacks
// it, e.g. after SCRIPT FLUSH or on a newly promoted master). The packages
// redislimiter, redislock and redisstorage build their scripts with it.
package luascript

import (
	"io/fs"

	"github.com/redis/go-redis/v9"
)

// New returns the script lua/prelude.lua + lua/NAME.lua of files. It
// panics when either file is missing: the files are embedded at build
// time, so a missing one is a mistake of the package's source that its
// first test (or its first import) shows.
func New(files fs.FS, name string) *redis.Script {
	return redis.NewScript(read(files, "prelude") + read(files, name))
}

func read(files fs.FS, name string) string {
	b, err := fs.ReadFile(files, "lua/"+name+".lua")
	if err != nil {
		panic("luascript: " + err.Error())
	}
	return string(b)
}
