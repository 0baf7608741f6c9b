package bridge

// ReferenceDecodePageMessage is the reference decoder alone, without the fast path of
// fastjson.go. It exists for bench/jsoncmp, which compares that fast path with JSON libraries
// (issue 10) and needs the reference as the baseline and as the libraries' fallback.
// Production code calls DecodePageMessage.
func ReferenceDecodePageMessage(b []byte) (*PageMessage, error) { return decodePageMessage(b) }
