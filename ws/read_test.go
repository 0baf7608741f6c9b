package ws

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// parsedFrame is what the parser reported, for comparing runs.
type parsedFrame struct {
	op      byte
	payload string
}

// frameRecorder is a frameHandler that keeps every parsedFrame; it stops after a close frame as the
// connection does.
type frameRecorder struct{ events []parsedFrame }

func (r *frameRecorder) onFrame(op byte, p []byte) bool {
	r.events = append(r.events, parsedFrame{op, string(p)})
	return op != OpClose
}

// clientFrame builds a masked client frame; first carries FIN|RSV|opcode as is.
func clientFrame(first byte, payload []byte, mask bool) []byte {
	n := len(payload)
	b := []byte{first}
	mbit := byte(0)
	if mask {
		mbit = 0x80
	}
	switch {
	case n < 126:
		b = append(b, mbit|byte(n))
	case n <= 0xFFFF:
		b = append(b, mbit|126, byte(n>>8), byte(n))
	default:
		b = append(b, mbit|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !mask {
		return append(b, payload...)
	}
	key := [4]byte{0x37, 0xfa, 0x21, 0x3d}
	b = append(b, key[:]...)
	for i, c := range payload {
		b = append(b, c^key[i&3])
	}
	return b
}

func text(s string) []byte { return clientFrame(0x80|OpText, []byte(s), true) }

func cat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

// run feeds input in the given piece sizes (cycled; nil = all at once) and returns the
// events and the first non-zero result.
func run(input []byte, limit int, pieces []int) ([]parsedFrame, int) {
	var r frameReader
	rec := &frameRecorder{}
	data := append([]byte(nil), input...) // feed unmasks in place
	for i := 0; len(data) > 0; i++ {
		k := len(data)
		if len(pieces) > 0 {
			k = min(pieces[i%len(pieces)], len(data))
		}
		if res := r.feed(data[:k], limit, rec); res != 0 {
			return rec.events, res
		}
		data = data[k:]
	}
	return rec.events, 0
}

func TestFrameParser(t *testing.T) {
	big := strings.Repeat("x", 300)
	huge := strings.Repeat("y", 70000)
	closeOK := binary.BigEndian.AppendUint16(nil, 1000)
	tests := []struct {
		name   string
		in     []byte
		limit  int
		want   []parsedFrame
		result int
	}{
		{"text", text(`{"parsedFrame":"pusher:ping"}`), 0, []parsedFrame{{OpText, `{"parsedFrame":"pusher:ping"}`}}, 0},
		{"empty text", text(""), 0, []parsedFrame{{OpText, ""}}, 0},
		{"binary", clientFrame(0x80|OpBinary, []byte{0, 1, 2}, true), 0, []parsedFrame{{OpBinary, "\x00\x01\x02"}}, 0},
		{"two in one read", cat(text("a"), text("bc")), 0, []parsedFrame{{OpText, "a"}, {OpText, "bc"}}, 0},
		{"16-bit length", text(big), 0, []parsedFrame{{OpText, big}}, 0},
		{"64-bit length", text(huge), 0, []parsedFrame{{OpText, huge}}, 0},
		{"fragmented", cat(clientFrame(OpText, []byte("he"), true), clientFrame(OpContinuation, []byte("ll"), true), clientFrame(0x80|OpContinuation, []byte("o"), true)), 0,
			[]parsedFrame{{OpContinuation, ""}, {OpContinuation, ""}, {OpText, "hello"}}, 0},
		{"ping inside fragments", cat(clientFrame(OpText, []byte("a"), true), clientFrame(0x80|OpPing, []byte("p"), true), clientFrame(0x80|OpContinuation, []byte("b"), true)), 0,
			[]parsedFrame{{OpContinuation, ""}, {OpPing, "p"}, {OpText, "ab"}}, 0},
		{"ping pong", cat(clientFrame(0x80|OpPing, []byte("hi"), true), clientFrame(0x80|OpPong, nil, true)), 0, []parsedFrame{{OpPing, "hi"}, {OpPong, ""}}, 0},
		{"close stops", cat(clientFrame(0x80|OpClose, append(closeOK, "bye"...), true), text("after")), 0, []parsedFrame{{OpClose, "\x03\xe8bye"}}, feedStop},
		{"close without code", clientFrame(0x80|OpClose, nil, true), 0, []parsedFrame{{OpClose, ""}}, feedStop},
		{"unmasked", clientFrame(0x80|OpText, []byte("a"), false), 0, nil, CloseProtocolError},
		{"unmasked after good", cat(text("a"), clientFrame(0x80|OpText, []byte("b"), false)), 0, []parsedFrame{{OpText, "a"}}, CloseProtocolError},
		{"rsv1", clientFrame(0xC0|OpText, []byte("a"), true), 0, nil, CloseProtocolError},
		{"rsv3", clientFrame(0x90|OpText, []byte("a"), true), 0, nil, CloseProtocolError},
		{"opcode 3", clientFrame(0x83, []byte("a"), true), 0, nil, CloseProtocolError},
		{"opcode 0xB", clientFrame(0x8B, nil, true), 0, nil, CloseProtocolError},
		{"continuation first", clientFrame(0x80|OpContinuation, []byte("a"), true), 0, nil, CloseProtocolError},
		{"text inside fragments", cat(clientFrame(OpText, []byte("a"), true), text("b")), 0, []parsedFrame{{OpContinuation, ""}}, CloseProtocolError},
		{"fragmented ping", clientFrame(OpPing, nil, true), 0, nil, CloseProtocolError},
		{"ping too long", clientFrame(0x80|OpPing, []byte(big[:126]), true), 0, nil, CloseProtocolError},
		{"bad close code", clientFrame(0x80|OpClose, binary.BigEndian.AppendUint16(nil, 1005), true), 0, nil, CloseProtocolError},
		{"close reason not utf-8", clientFrame(0x80|OpClose, append(closeOK, 0xff), true), 0, nil, CloseProtocolError},
		{"length msb set", []byte{0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}, 0, nil, CloseProtocolError},
		{"at limit", text("12345"), 5, []parsedFrame{{OpText, "12345"}}, 0},
		{"over limit", text("123456"), 5, nil, CloseTooBig},
		{"control ignores limit", clientFrame(0x80|OpPing, []byte("123456"), true), 5, []parsedFrame{{OpPing, "123456"}}, 0},
		{"fragments over limit", cat(clientFrame(OpText, []byte("123"), true), clientFrame(0x80|OpContinuation, []byte("456"), true)), 5, []parsedFrame{{OpContinuation, ""}}, CloseTooBig},
		{"huge over limit", text(huge), 10000, nil, CloseTooBig},
		{"header alone over limit", []byte{0x81, 0xFF, 0, 0, 0, 0, 0x7F, 0, 0, 0, 1, 2, 3, 4}, 10000, nil, CloseTooBig},
		{"close body of one byte", clientFrame(0x80|OpClose, []byte{3}, true), 0, nil, CloseProtocolError},
		{"text not utf-8", text("a\xffb"), 0, nil, CloseInvalidPayload},
		{"text surrogate", text("\xed\xa0\x80"), 0, nil, CloseInvalidPayload},
		{"binary not checked", clientFrame(0x80|OpBinary, []byte{0xff}, true), 0, []parsedFrame{{OpBinary, "\xff"}}, 0},
		{"code point split across fragments", cat(clientFrame(OpText, []byte("h\xe2\x82"), true), clientFrame(0x80|OpContinuation, []byte("\xacllo"), true)), 0,
			[]parsedFrame{{OpContinuation, ""}, {OpText, "h€llo"}}, 0},
		{"code point cut at message end", cat(clientFrame(OpText, []byte("h\xe2"), true), clientFrame(0x80|OpContinuation, []byte("\x82"), true)), 0,
			[]parsedFrame{{OpContinuation, ""}}, CloseInvalidPayload},
		{"bad byte in first fragment is not kept for the end", clientFrame(OpText, []byte("\xc0\xaf"), true), 0, nil, CloseInvalidPayload},
		{"bad byte in middle fragment", cat(clientFrame(OpText, []byte("ok"), true), clientFrame(OpContinuation, []byte("\xff"), true), clientFrame(0x80|OpContinuation, []byte("x"), true)), 0,
			[]parsedFrame{{OpContinuation, ""}}, CloseInvalidPayload},
		{"binary fragments not checked", cat(clientFrame(OpBinary, []byte{0xe2}, true), clientFrame(0x80|OpContinuation, []byte{0xff}, true)), 0,
			[]parsedFrame{{OpContinuation, ""}, {OpBinary, "\xe2\xff"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := fmt.Sprint(tt.want, tt.result)
			if got, res := run(tt.in, tt.limit, nil); fmt.Sprint(got, res) != want {
				t.Fatalf("whole: got %v %d, want %s", got, res, want)
			}
			// The same stream split at every byte boundary, and fed a byte at a time.
			for cut := 1; cut < len(tt.in); cut++ {
				if len(tt.in) > 512 && cut > 32 && cut < len(tt.in)-32 && cut%997 != 0 {
					continue // long payloads: every header boundary, then a sample
				}
				if got, res := run(tt.in, tt.limit, []int{cut, len(tt.in)}); fmt.Sprint(got, res) != want {
					t.Fatalf("split at %d: got %v %d, want %s", cut, got, res, want)
				}
			}
			if got, res := run(tt.in, tt.limit, []int{1}); fmt.Sprint(got, res) != want {
				t.Fatalf("bytewise: got %v %d, want %s", got, res, want)
			}
		})
	}
}

// TestFrameParserIdleHoldsNothing checks that no buffer survives a completed frame.
func TestFrameParserIdleHoldsNothing(t *testing.T) {
	var r frameReader
	rec := &frameRecorder{}
	in := cat(clientFrame(OpText, []byte("ab"), true), clientFrame(0x80|OpContinuation, []byte("c"), true))
	for i := range in {
		if res := r.feed(in[i:i+1], 0, rec); res != 0 {
			t.Fatal(res)
		}
	}
	if r.partial != nil || r.msg != nil || r.inMsg {
		t.Fatalf("reader holds state after a complete message: %+v", r)
	}
}

// FuzzFrameParser checks that any stream, cut into pieces of fuzzed sizes, parses the same
// as when it comes whole, never panics, never reports a text message that is not UTF-8 or
// a message over the limit, and never leaves a buffer behind between frames.
func FuzzFrameParser(f *testing.F) {
	closeOK := binary.BigEndian.AppendUint16(nil, 1000)
	f.Add(text(`{"event":"pusher:subscribe","data":{"channel":"a"}}`), []byte{3}, 100)
	f.Add(cat(clientFrame(OpText, []byte("he"), true), clientFrame(0x80|OpPing, nil, true), clientFrame(0x80|OpContinuation, []byte("llo"), true)), []byte{1, 5, 2}, 0)
	f.Add(text(strings.Repeat("z", 200)), []byte{7, 130}, 150)
	f.Add(clientFrame(0x80|OpClose, append(closeOK, "bye"...), true), []byte{2}, 0)
	f.Add(clientFrame(0x80|OpText, []byte("a"), false), []byte{1}, 0)
	f.Add([]byte{0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4}, []byte{5}, 0)
	f.Add(cat(clientFrame(OpText, []byte("h\xe2\x82"), true), clientFrame(0x80|OpContinuation, []byte("\xacllo"), true)), []byte{4, 1, 1}, 0)
	f.Add(cat(clientFrame(OpText, []byte("ok"), true), clientFrame(0x80|OpContinuation, []byte("\xed\xa0\x80"), true)), []byte{9}, 0)
	f.Add(cat(text("€"), clientFrame(0x80|OpBinary, []byte{0xff}, true), clientFrame(0x80|OpPong, nil, true)), []byte{1, 2, 3}, 64)
	f.Fuzz(func(t *testing.T, in []byte, cuts []byte, limit int) {
		if limit < 0 || limit > 1<<20 {
			limit = 1 << 20 // keep the fuzzer's allocations bounded
		}
		pieces := make([]int, 0, len(cuts))
		for _, c := range cuts {
			pieces = append(pieces, int(c)+1)
		}
		if len(pieces) == 0 {
			pieces = []int{1}
		}
		wantEv, wantRes := run(in, limit, nil)
		gotEv, gotRes := run(in, limit, pieces)
		if fmt.Sprint(gotEv, gotRes) != fmt.Sprint(wantEv, wantRes) {
			t.Fatalf("in pieces %v: %v %d, whole: %v %d", pieces, gotEv, gotRes, wantEv, wantRes)
		}
		for _, e := range gotEv {
			if (e.op == OpText || e.op == OpBinary) && limit > 0 && len(e.payload) > limit {
				t.Fatalf("message of %d bytes passed limit %d", len(e.payload), limit)
			}
			if e.op == OpText && !utf8.ValidString(e.payload) {
				t.Fatalf("text message not UTF-8 passed: %q", e.payload)
			}
		}
		// Whatever came before, a parser that consumed everything without error holds no
		// frame buffer once the input ends on a frame boundary it has handled.
		var r frameReader
		data := append([]byte(nil), in...)
		if r.feed(data, limit, &frameRecorder{}) == 0 && r.partial == nil && !r.inMsg && (r.msg != nil || r.text.n != 0) {
			t.Fatalf("idle parser holds a message buffer: %+v", r)
		}
	})
}
