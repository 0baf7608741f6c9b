package pusher

// CloseReason says why the server ended a connection. One enum feeds the close frame,
// logs and metrics, so every path that disconnects names its reason the same way.
type CloseReason int

// Close reasons. Codes 4000-4099 stop pusher-js from reconnecting, 4100-4199 make it back
// off, 4200-4299 make it reconnect at once.
const (
	CloseNone CloseReason = iota
	CloseClientGone
	CloseAppNotFound
	CloseAppDisabled
	CloseOverQuota
	CloseOriginNotAllowed
	CloseUnsupportedProtocol
	CloseServerShutdown
	ClosePongTimeout
	CloseSlowConsumer
	CloseTerminated
	CloseMessageTooBig
	CloseWriteError
	CloseProtocolError
	CloseInvalidPayload
	CloseRateLimited  // Reverb's rate_limiting.terminate_on_limit (ratelimit.go)
	CloseOverCapacity // the node holds Options.MaxConnections: pusher-js backs off and retries
)

type closeInfo struct {
	code    int
	message string
	label   string
}

var closeInfos = [...]closeInfo{
	CloseNone:                {1000, "", "none"},
	CloseClientGone:          {1000, "", "client_gone"},
	CloseAppNotFound:         {4001, "Application does not exist", "app_not_found"},
	CloseAppDisabled:         {4003, "Application is disabled", "app_disabled"},
	CloseOverQuota:           {4004, "Application is over connection quota", "over_quota"},
	CloseOriginNotAllowed:    {4009, "Origin not allowed", "origin_not_allowed"},
	CloseUnsupportedProtocol: {4007, "Unsupported protocol version", "unsupported_protocol"},
	CloseServerShutdown:      {4200, "Server is restarting, reconnect", "server_shutdown"},
	ClosePongTimeout:         {4201, "Pong reply not received in time", "pong_timeout"},
	CloseSlowConsumer:        {4100, "Client too slow to receive messages", "slow_consumer"},
	CloseTerminated:          {4009, "Connection terminated by the server", "terminated"},
	CloseMessageTooBig:       {1009, "Message too big", "message_too_big"},
	CloseWriteError:          {1006, "", "write_error"},
	CloseProtocolError:       {1002, "", "protocol_error"},
	CloseInvalidPayload:      {1007, "Text message is not valid UTF-8", "invalid_payload"},
	CloseRateLimited:         {1006, "", "rate_limited"}, // no close frame: the socket is ended, as Reverb does
	CloseOverCapacity:        {4100, "Over capacity", "over_capacity"},
}

// Code is the WebSocket close code sent for r.
func (r CloseReason) Code() int { return closeInfos[r].code }

// Message is the human text sent with r.
func (r CloseReason) Message() string { return closeInfos[r].message }

// String is the label used in logs and metrics.
func (r CloseReason) String() string { return closeInfos[r].label }

// sendsPusherError reports whether a pusher:error precedes the close frame.
func (r CloseReason) sendsPusherError() bool { return r.Code() >= 4000 && r.Code() < 5000 }

// Protocol error codes sent in pusher:error without closing.
const (
	codeInvalidMessage  = 4200
	codeUnauthorized    = 4009
	codeClientEventsOff = 4301
	codeOverCapacity    = 4100
)
