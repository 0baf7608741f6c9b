package config

// Compression is server.compression: permessage-deflate (RFC 7692) for the clients that
// offer it (every browser does), without context takeover in either direction, so a
// connection keeps no compression state between messages.
//
// Off by default: Laravel Reverb never negotiates compression, so a team moving from it
// sized its servers for uncompressed traffic, and upgrading reverbgo must not change the
// CPU a delivery costs until the operator chooses to trade CPU for bytes on the wire.
// Turning it on needs no client change: a client that does not offer it is unaffected.
type Compression struct {
	Enabled bool `mapstructure:"enabled"`
	// MinBytes is the smallest message payload sent compressed; smaller ones go out plain
	// (0 = DefaultCompressionMinBytes; 1 compresses everything).
	MinBytes int `mapstructure:"min_bytes"`
	// Level is the deflate level, 1 (fastest, the default when 0) to 9 (smallest).
	Level int `mapstructure:"level"`
}

// Compression defaults and bounds.
const (
	DefaultCompressionMinBytes = 256
	DefaultCompressionLevel    = 1
	MinCompressionLevel        = 1
	MaxCompressionLevel        = 9
)

func (c *Compression) applyDefaults() {
	setInt(&c.MinBytes, DefaultCompressionMinBytes)
	setInt(&c.Level, DefaultCompressionLevel)
}

func (c *Compression) validate(v *validator) {
	v.nonNegative("server.compression.min_bytes", int64(c.MinBytes))
	if c.Level != 0 && (c.Level < MinCompressionLevel || c.Level > MaxCompressionLevel) { // 0: the default
		v.add("server.compression.level", "must be between %d (fastest) and %d (smallest), got %d",
			MinCompressionLevel, MaxCompressionLevel, c.Level)
	}
}
