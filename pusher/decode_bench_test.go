package pusher

import "testing"

// The hand-written fast path of client frames against the encoding/json fallback, on the
// frames a Pusher client sends most. benchstat -col /impl puts the two side by side:
//
//	go test -run '^$' -bench DecodeClientFrame -count 10 ./pusher | tee b.txt
//	benchstat -col /impl b.txt
//
// The comparison with JSON libraries (sonic, fastjson), kept out of the server's go.mod, is
// bench/jsoncmp.
func BenchmarkDecodeClientFrame(b *testing.B) {
	inputs := []struct{ name, body string }{
		{"ping", `{"event":"pusher:ping","data":{}}`},
		{"subscribe-private", `{"event":"pusher:subscribe","data":{"auth":"app-key:5f2b7c0cbd6d2b6a1b9b1e0f4f6a0e2a1c3d5e7f9b1d3f5a7c9e1b3d5f7a9c1e","channel":"private-orders.42"}}`},
		{"client-event", `{"event":"client-typing","channel":"private-chat.7","data":{"user":"ada","typing":true}}`},
	}
	impls := []struct {
		name   string
		decode func([]byte, *ClientMessage) bool
	}{
		{"ours", func(b []byte, m *ClientMessage) bool { return fastClientMessage(b, m) }},
		{"std", func(b []byte, m *ClientMessage) bool { return unmarshalClientMessage(b, m) == nil }},
	}
	for _, in := range inputs {
		body := []byte(in.body)
		for _, im := range impls {
			b.Run("in="+in.name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				var m ClientMessage
				for b.Loop() {
					if m = (ClientMessage{}); !im.decode(body, &m) || m.Event == "" {
						b.Fatalf("%s: not decoded", in.name)
					}
				}
			})
		}
	}
}
