package main

import (
	"io"
	"log/slog"

	"github.com/reverbgo/reverbgo/config"
)

// newLogger builds the process logger from server.log; level, when not "", is --log-level
// and wins over the file.
func newLogger(w io.Writer, l config.Log, level string) (*slog.Logger, error) {
	if level == "" {
		level = l.Level
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return slog.New(slog.NewJSONHandler(w, opts)), nil
}
