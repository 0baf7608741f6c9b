package redisx

import (
	"context"
	"embed"
	"time"

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

var replaceHash = Script("redisx_replace_hash")

// ReplaceHashes replaces each hash of hashes (key -> fields; none = deleted) by its fields
// with ttl, each atomically (one script per key, so a reader never sees a hash between its
// DEL and its HSET) and all in one pipeline, whatever slots the keys are in.
func ReplaceHashes(ctx context.Context, rdb redis.UniversalClient, hashes map[string]map[string]string, ttl time.Duration) error {
	if len(hashes) == 0 {
		return nil
	}
	pipe := rdb.Pipeline()
	for key, fields := range hashes {
		if len(fields) == 0 {
			pipe.Del(ctx, key)
			continue
		}
		args := make([]any, 0, 1+2*len(fields))
		args = append(args, ttl.Milliseconds())
		for f, v := range fields {
			args = append(args, f, v)
		}
		// Sent whole: go-redis does not fall back from EVALSHA to EVAL in a pipeline.
		replaceHash.Eval(ctx, pipe, []string{key}, args...)
	}
	_, err := pipe.Exec(ctx)
	return err
}
