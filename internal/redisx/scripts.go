package redisx

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts of every Redis store of the node, one file each in lua/ (named
// <package>_<script>.lua), so that what runs inside Redis can be read, reviewed and
// tested in one place.
//
//go:embed lua/*.lua
var lua embed.FS

// Script returns the embedded script made of the files names (without .lua), in order: a
// library of functions several scripts share comes first (e.g. webhooks_push, then the
// script that calls it). A missing name is a programming error: it panics when the package
// that names it is initialised.
func Script(names ...string) *redis.Script {
	var src []byte
	for _, name := range names {
		b, err := lua.ReadFile("lua/" + name + ".lua")
		if err != nil {
			panic("redisx: no script " + name)
		}
		src = append(append(src, b...), '\n')
	}
	return redis.NewScript(string(src))
}
