package pusher

import (
	"bytes"
	"net/url"
	"strconv"
	"testing"
)

func TestAppendEstablished(t *testing.T) {
	want := EventFrame("pusher:connection_established", "", establishedData("123.456", 30))
	if got := appendEstablished(nil, "123.456", 30); !bytes.Equal(got, want) {
		t.Fatalf("established %q, want %q", got, want)
	}
}

func TestQueryProtocol(t *testing.T) {
	for _, q := range []string{"", "protocol=7", "a=1&protocol=4", "protocol", "protocol=", "x=1&protocol=7&protocol=4",
		"prot%6Fcol=4", "protocol=7;x", "a;b=1&protocol=3", "protocol=+7", "protocol=%37", "&&protocol=6&"} {
		vals, _ := url.ParseQuery(q)
		v := vals.Get("protocol")
		if got := queryProtocol([]byte(q)); got != v {
			t.Errorf("%q: %q, want %q", q, got, v)
		}
	}
}

func establishedData(socketID string, activityTimeout int) string {
	return `{"socket_id":"` + socketID + `","activity_timeout":` + strconv.Itoa(activityTimeout) + `}`
}
