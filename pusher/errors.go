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

// ProtoError is a pusher:error the server answers a message with, without closing the
// connection. One table gives each its code and message, as closeInfos does for
// CloseReason: clients and tests outside this repository match on both.
type ProtoError int

// Protocol errors.
const (
	ErrInvalidMessage ProtoError = iota
	ErrClientEventPrefix
	ErrBusy
	ErrInvalidChannelName
	ErrInvalidResume // sent with the reason appended (sendErrorDetail)
	ErrUnauthorized
	ErrInvalidChannelData
	ErrInvalidPresenceMember
	ErrPresenceUnavailable
	ErrPresenceFull
	ErrRedisUnavailable
	ErrClientEventsDisabled
	ErrClientEventChannel
	ErrClientEventsNotAllowed
	ErrClientEventNotSubscribed
	ErrClientEventRate
	ErrUserAuthDisabled
	ErrInvalidSignin
	ErrInvalidUserData // sent alone, or with the reason appended
	ErrUserDataNoID
	ErrRateLimited // Reverb's rate_limiting without terminate_on_limit (ratelimit.go)
)

type protoErrorInfo struct {
	code    int
	message string
}

var protoErrors = [...]protoErrorInfo{
	ErrInvalidMessage:           {codeInvalidMessage, "Invalid message format"},
	ErrClientEventPrefix:        {codeInvalidMessage, "Client events must be prefixed by 'client-'"},
	ErrBusy:                     {codeOverCapacity, "Server is busy, try again"},
	ErrInvalidChannelName:       {codeUnauthorized, "Invalid channel name"},
	ErrInvalidResume:            {codeInvalidMessage, "Invalid resume"},
	ErrUnauthorized:             {codeUnauthorized, "Connection is unauthorized"},
	ErrInvalidChannelData:       {codeUnauthorized, "Invalid presence channel_data"},
	ErrInvalidPresenceMember:    {codeUnauthorized, "Invalid presence user_id or user_info"},
	ErrPresenceUnavailable:      {codeOverCapacity, "Presence is unavailable, try again"},
	ErrPresenceFull:             {codeOverCapacity, "Presence channel is over capacity"},
	ErrRedisUnavailable:         {codeOverCapacity, "Redis is unavailable, try again"},
	ErrClientEventsDisabled:     {codeClientEventsOff, "The app does not have client messaging enabled."},
	ErrClientEventChannel:       {codeInvalidMessage, "Client event needs a valid channel"},
	ErrClientEventsNotAllowed:   {codeClientEventsOff, "Client events are not allowed on this channel"},
	ErrClientEventNotSubscribed: {codeClientEventsOff, "Client event rejected: not subscribed to the channel"},
	ErrClientEventRate:          {codeClientEventsOff, "Client event rate limit exceeded"},
	ErrUserAuthDisabled:         {codeUnauthorized, "User authentication is disabled for this app"},
	ErrInvalidSignin:            {codeUnauthorized, "Invalid signin signature"},
	ErrInvalidUserData:          {codeUnauthorized, "Invalid user_data"},
	ErrUserDataNoID:             {codeUnauthorized, "user_data needs an id"},
	ErrRateLimited:              {codeRateLimited, messageRateLimited},
}

// protoErrorFrames are the table's frames, encoded once: an error costs no encoding.
var protoErrorFrames = func() []Frame {
	out := make([]Frame, len(protoErrors))
	for e, info := range protoErrors {
		out[e] = errorFrame(info.code, info.message)
	}
	return out
}()

// Code is the pusher:error code sent for e.
func (e ProtoError) Code() int { return protoErrors[e].code }

// Message is the text sent with e.
func (e ProtoError) Message() string { return protoErrors[e].message }

// frame is e's pusher:error frame.
func (e ProtoError) frame() Frame { return protoErrorFrames[e] }
