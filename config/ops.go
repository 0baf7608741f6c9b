package config

import (
	"net"
	"strconv"
)

// Log formats and levels accepted in server.log.
var (
	LogFormats = []string{"json", "text"}
	LogLevels  = []string{"debug", "info", "warn", "error"}
)

// validateOps checks server.log and metrics.
func (c *Config) validateOps(v *validator) {
	l := &c.Server.Log
	if !oneOf(l.Format, LogFormats) {
		v.add("server.log.format", "must be json or text, got %q", l.Format)
	}
	if !oneOf(l.Level, LogLevels) {
		v.add("server.log.level", "must be one of debug, info, warn, error, got %q", l.Level)
	}
	m := &c.Metrics
	if m.Listen != "" {
		host, port, err := net.SplitHostPort(m.Listen)
		n, perr := strconv.Atoi(port)
		if err != nil || perr != nil || n < 1 || n > 65535 {
			v.add("metrics.listen", "must be empty or host:port (e.g. 127.0.0.1:9601), got %q", m.Listen)
		} else if host == c.Server.Host && n == c.Server.Port {
			v.add("metrics.listen", "must differ from server.host:server.port (leave it empty to serve on the main listener)")
		}
	}
	for _, r := range m.Token {
		if r < '!' || r > '~' {
			v.add("metrics.token", "must be printable ASCII without spaces (it is sent in an HTTP header)")
			break
		}
	}
}

func oneOf(s string, list []string) bool {
	for _, x := range list {
		if s == x {
			return true
		}
	}
	return false
}
