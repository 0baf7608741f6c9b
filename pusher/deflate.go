package pusher

import (
	"github.com/reverbgo/reverbgo/config"
	"github.com/reverbgo/reverbgo/ws"
)

// wsCompression is server.compression for the transport: permessage-deflate is negotiated
// and applied there (ws.Deflater); this package only sends a broadcast's shared frame
// through SendFrame and its own frames through Send (conn.go).
func wsCompression(c config.Compression) ws.Compression {
	return ws.Compression{Enabled: c.Enabled, MinBytes: c.MinBytes, Level: c.Level}
}
