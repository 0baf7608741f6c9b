package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/reverbgo/reverbgo/config"
)

// printReverbEnvWarnings is config check's report on Laravel Reverb variables: a REVERB_*
// name reverbgo does not know (misspelt, or a Reverb setting newer than this list) is a
// warning, since it would otherwise be ignored without a word; a known Reverb setting that
// reverbgo does not apply is a note with the reason. Neither fails the check.
func printReverbEnvWarnings(w io.Writer, environ []string) {
	for _, name := range config.UnknownReverbEnv(environ) {
		fmt.Fprintf(w, "reverbgo: warning: %s is set but is not a Reverb setting reverbgo knows; it is ignored\n", name)
	}
	for _, e := range config.IgnoredReverbEnv(environ) {
		fmt.Fprintf(w, "reverbgo: note: %s is set but not applied: %s\n", e.Name, e.Note)
	}
}

// warnReverbEnv logs the same at start-up.
func warnReverbEnv(logger *slog.Logger, environ []string) {
	for _, name := range config.UnknownReverbEnv(environ) {
		logger.Warn("unknown Reverb environment variable ignored", "name", name)
	}
	for _, e := range config.IgnoredReverbEnv(environ) {
		logger.Info("Reverb environment variable not applied", "name", e.Name, "reason", e.Note)
	}
}
