package pusher

import (
	"bytes"
	"net/url"
	"strconv"
	"unsafe"

	"github.com/reverbgo/reverbgo/ws"
)

// The Pusher side of the fast path's handshake: the ws listener parses the head and asks
// the Server (Accept) with the raw query and Origin; these read them without allocating.

// queryProtocol returns url.Values.Get("protocol") of a raw query without building the
// map in the common case; escapes and ';' (which ParseQuery rejects per pair) take the
// exact route.
func queryProtocol(q []byte) string {
	if bytes.ContainsAny(q, "%+;") {
		v, _ := url.ParseQuery(string(q))
		return v.Get("protocol")
	}
	for len(q) > 0 {
		pair := q
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			pair, q = q[:i], q[i+1:]
		} else {
			q = nil
		}
		k, v := pair, []byte(nil)
		if i := bytes.IndexByte(pair, '='); i >= 0 {
			k, v = pair[:i], pair[i+1:]
		}
		if string(k) == "protocol" {
			return string(v)
		}
	}
	return ""
}

// protocolSupportedRaw accepts a missing protocol and any version from 5 up, read from a
// raw query.
func protocolSupportedRaw(q []byte) bool {
	v := queryProtocol(q)
	if v == "" {
		return true
	}
	n, err := strconv.Atoi(v)
	return err == nil && n >= 5
}

// appendEstablished appends the connection_established frame EventFrame would build.
func appendEstablished(dst []byte, socketID string, activityTimeout int) []byte {
	var data [96]byte
	d := append(data[:0], `{"socket_id":"`...)
	d = append(d, socketID...)
	d = append(d, `","activity_timeout":`...)
	d = strconv.AppendInt(d, int64(activityTimeout), 10)
	d = append(d, '}')
	var ev [192]byte
	e := append(ev[:0], `{"event":"pusher:connection_established","data":`...)
	e = appendJSONString(e, unsafe.String(unsafe.SliceData(d), len(d))) // copied, not kept: no string made
	e = append(e, '}')
	return ws.AppendTextFrame(dst, e)
}
