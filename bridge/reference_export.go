package bridge

import "time"

// ReferenceDecodePageMessage is the reference decoder alone, without the fast path of
// fastjson.go. It exists for bench/jsoncmp, which compares that fast path with JSON libraries
// (issue 10) and needs the reference as the baseline and as the libraries' fallback.
// Production code calls DecodePageMessage.
func ReferenceDecodePageMessage(b []byte) (*PageMessage, error) { return decodePageMessage(b) }

// CallRequest is a decoded agent request body (POST /toolmark/calls or /toolmark/describe),
// named for bench/jsoncmp.
type CallRequest = callRequest

// DecodeCallRequest is decodeCallRequest (fast path, then the reference), for bench/jsoncmp.
func DecodeCallRequest(body []byte, callKind string, maxTimeout time.Duration) (*CallRequest, error) {
	return decodeCallRequest(body, callKind, maxTimeout)
}

// ReferenceDecodeCallRequest is the reference decoder alone, for bench/jsoncmp.
func ReferenceDecodeCallRequest(body []byte, callKind string, maxTimeout time.Duration) (*CallRequest, error) {
	return slowDecodeCallRequest(body, callKind, maxTimeout)
}
