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

// Script returns the embedded script name (without .lua). A missing name is a programming
// error: it panics when the package that names it is initialised.
func Script(name string) *redis.Script {
	src, err := lua.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redisx: no script " + name)
	}
	return redis.NewScript(string(src))
}
