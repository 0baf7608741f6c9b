package ws

import (
	"bytes"
	stdflate "compress/flate"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// deflateMsg compresses p as a permessage-deflate client would (RFC 7692 §7.2.1), with
// the standard library, so the server's inflater is checked against another encoder. One
// compressor is reused (building one costs far more than a message; fuzzing calls this a lot).
func deflateMsg(t testing.TB, p []byte) []byte {
	t.Helper()
	clientDeflate.Lock()
	defer clientDeflate.Unlock()
	var b bytes.Buffer
	if clientDeflate.w == nil {
		clientDeflate.w, _ = stdflate.NewWriter(&b, stdflate.BestCompression)
	}
	w := clientDeflate.w
	w.Reset(&b)
	_, _ = w.Write(p)
	_ = w.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte(deflateTail))
}

var clientDeflate struct {
	sync.Mutex
	w *stdflate.Writer
}

// inflateMsg inflates a compressed message payload with the standard library.
func inflateMsg(t testing.TB, p []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(stdflate.NewReader(io.MultiReader(bytes.NewReader(p), strings.NewReader(inflateTail))))
	if err != nil {
		t.Fatalf("inflate: %v", err)
	}
	return out
}

func TestAcceptDeflateOffer(t *testing.T) {
	tests := []struct {
		offer string
		want  bool
	}{
		{"permessage-deflate", true},
		{"PerMessage-Deflate", true},
		{"permessage-deflate; client_max_window_bits", true}, // what browsers send
		{"permessage-deflate; client_max_window_bits=10", true},
		{`permessage-deflate; client_max_window_bits="12"`, true},
		{"permessage-deflate; server_no_context_takeover; client_no_context_takeover", true},
		{"permessage-deflate; server_max_window_bits=15", false}, // would have to be echoed
		{"permessage-deflate ; client_no_context_takeover ", true},
		{"x-webkit-deflate-frame, permessage-deflate", true},
		{"foo; bar=1, permessage-deflate; client_max_window_bits", true},
		{"permessage-deflate; server_max_window_bits=10", false},
		{"permessage-deflate; server_max_window_bits=10, permessage-deflate", true}, // the fallback offer
		{"permessage-deflate; server_max_window_bits", false},
		{"permessage-deflate; client_max_window_bits=7", false},
		{"permessage-deflate; client_max_window_bits=16", false},
		{"permessage-deflate; client_max_window_bits=010", false},
		{"permessage-deflate; server_no_context_takeover=1", false},
		{"permessage-deflate; server_no_context_takeover; server_no_context_takeover", false},
		{"permessage-deflate; unknown_param", false},
		{"permessage-deflate; client_max_window_bits=\"1\\0\"", false},
		{"x-webkit-deflate-frame", false},
		{"permessage-deflate-x", false},
		{"", false},
		{";permessage-deflate", false},
		{"permessage-deflate;", false},
		{"permessage-deflate; =1", false},
		{"permessage-deflate; client_max_window_bits=\"10", false},
		{"foo bar, permessage-deflate", false}, // broken syntax: nothing after it is believed
	}
	for _, tt := range tests {
		t.Run(tt.offer, func(t *testing.T) {
			if got := acceptDeflateOffer([]byte(tt.offer)); got != tt.want {
				t.Fatalf("acceptDeflateOffer(%q) = %v, want %v", tt.offer, got, tt.want)
			}
		})
	}
}

func TestDeflaterFrame(t *testing.T) {
	d := NewDeflater(Compression{Enabled: true, MinBytes: 256, Level: 1})
	json := []byte(`{"event":"App\\Events\\OrderShipped","channel":"orders","data":"` + strings.Repeat(`{\"id\":1,\"status\":\"shipped\"},`, 40) + `"}`)
	for _, size := range []int{len(json), 70000} {
		payload := bytes.Repeat(json, size/len(json)+1)[:size]
		z := d.Frame(TextFrame(payload))
		if z == nil {
			t.Fatalf("%d bytes: not compressed", size)
		}
		if z[0] != 0x80|0x40|OpText {
			t.Fatalf("first byte %#x, want FIN|RSV1|text", z[0])
		}
		op, body, ok := splitDataFrame(append([]byte{0x81}, z[1:]...))
		if !ok || op != OpText || len(body) >= len(payload) {
			t.Fatalf("%d bytes: bad frame (ok %v, %d bytes)", size, ok, len(body))
		}
		if got := inflateMsg(t, body); !bytes.Equal(got, payload) {
			t.Fatalf("%d bytes: round trip differs", size)
		}
	}
	small := TextFrame(json[:255])
	if d.Frame(small) != nil || !bytes.Equal(d.Compress(small), small) {
		t.Fatal("a payload under min_bytes was compressed")
	}
	random := make([]byte, 1000)
	for i := range random {
		random[i] = byte(i*7919 + i*i*31)
	}
	if z := d.Frame(TextFrame(random)); z != nil && len(z) >= len(TextFrame(random)) {
		t.Fatal("an incompressible frame grew")
	}
	if d.Frame(AppendFrame(nil, OpPing, bytes.Repeat([]byte("p"), 300))) != nil {
		t.Fatal("a control frame was compressed")
	}
	var off *Deflater
	if f := TextFrame(json); !bytes.Equal(off.Compress(f), f) {
		t.Fatal("a nil Deflater changed the frame")
	}
	if NewDeflater(Compression{}) != nil {
		t.Fatal("a disabled Compression built a Deflater")
	}
}

// runDeflate is run with permessage-deflate negotiated.
func runDeflate(input []byte, limit int, pieces []int) ([]parsedFrame, int) {
	r := frameReader{deflate: true}
	rec := &frameRecorder{}
	data := append([]byte(nil), input...)
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

// RFC 7692 §6 on the parser: RSV1 marks the first frame of a compressed message only on
// a connection that negotiated the extension, never a control frame or a continuation.
func TestFrameParserDeflate(t *testing.T) {
	msg := `{"event":"client-typing","channel":"private-chat","data":"` + strings.Repeat("hello ", 50) + `"}`
	z := deflateMsg(t, []byte(msg))
	half := len(z) / 2
	tests := []struct {
		name    string
		deflate bool
		in      []byte
		limit   int
		want    []parsedFrame
		result  int
	}{
		{"compressed text", true, clientFrame(0xC0|OpText, z, true), 0, []parsedFrame{{OpText, msg}}, 0},
		{"compressed then plain", true, cat(clientFrame(0xC0|OpText, z, true), text("plain")), 0, []parsedFrame{{OpText, msg}, {OpText, "plain"}}, 0},
		{"compressed fragments with a ping between", true, cat(clientFrame(0x40|OpText, z[:half], true), clientFrame(0x80|OpPing, []byte("p"), true), clientFrame(0x80|OpContinuation, z[half:], true)), 0,
			[]parsedFrame{{OpContinuation, ""}, {OpPing, "p"}, {OpText, msg}}, 0},
		{"compressed binary", true, clientFrame(0xC0|OpBinary, deflateMsg(t, []byte{0, 0xff, 1}), true), 0, []parsedFrame{{OpBinary, "\x00\xff\x01"}}, 0},
		{"empty compressed", true, clientFrame(0xC0|OpText, []byte{0x00}, true), 0, []parsedFrame{{OpText, ""}}, 0},
		{"RSV1 without the extension", false, clientFrame(0xC0|OpText, z, true), 0, nil, CloseProtocolError},
		{"RSV1 on a ping", true, clientFrame(0xC0|OpPing, []byte("p"), true), 0, nil, CloseProtocolError},
		{"RSV1 on a close", true, clientFrame(0xC0|OpClose, nil, true), 0, nil, CloseProtocolError},
		{"RSV1 on a continuation", true, cat(clientFrame(0x40|OpText, z[:half], true), clientFrame(0xC0|OpContinuation, z[half:], true)), 0,
			[]parsedFrame{{OpContinuation, ""}}, CloseProtocolError},
		{"RSV1 on a plain message's continuation", true, cat(clientFrame(OpText, []byte("a"), true), clientFrame(0xC0|OpContinuation, []byte("b"), true)), 0,
			[]parsedFrame{{OpContinuation, ""}}, CloseProtocolError},
		{"RSV2 with the extension", true, clientFrame(0xA0|OpText, z, true), 0, nil, CloseProtocolError},
		{"RSV1|RSV3", true, clientFrame(0xD0|OpText, z, true), 0, nil, CloseProtocolError},
		{"not deflate data", true, clientFrame(0xC0|OpText, []byte{0xff, 0xff, 0xff}, true), 0, nil, CloseInvalidPayload},
		{"inflates to invalid UTF-8", true, clientFrame(0xC0|OpText, deflateMsg(t, []byte("a\xffb")), true), 0, nil, CloseInvalidPayload},
		{"inflated at the limit", true, clientFrame(0xC0|OpText, z, true), len(msg), []parsedFrame{{OpText, msg}}, 0},
		{"inflated over the limit", true, clientFrame(0xC0|OpText, z, true), len(msg) - 1, nil, CloseTooBig},
		{"compressed frame over the limit", true, clientFrame(0xC0|OpText, z, true), len(z) - 1, nil, CloseTooBig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := fmt.Sprint(tt.want, tt.result)
			feed := run
			if tt.deflate {
				feed = runDeflate
			}
			for _, pieces := range [][]int{nil, {1}, {7, 3}} {
				if got, res := feed(tt.in, tt.limit, pieces); fmt.Sprint(got, res) != want {
					t.Fatalf("pieces %v: got %v %d, want %s", pieces, got, res, want)
				}
			}
		})
	}
}

// bomb is 64 MiB of zeros deflated: about 64 KiB on the wire. One MiB of zeros deflated
// and sync-flushed is a self-contained run of blocks (its matches reach back only into
// itself), so 64 copies of it are one valid stream, made in a fraction of the time that
// deflating 64 MiB takes under the race detector.
func bomb(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w, _ := stdflate.NewWriter(&b, stdflate.BestCompression)
	_, _ = w.Write(make([]byte, 1<<20))
	_ = w.Flush()
	return bytes.TrimSuffix(bytes.Repeat(b.Bytes(), 64), []byte(deflateTail))
}

// A message that inflates to 64 MiB is refused (1009) after inflating little more than
// the limit: the bytes allocated while refusing it stay near the limit, never near 64 MiB.
func TestInflateBombBounded(t *testing.T) {
	z := bomb(t)
	if len(z) > 80<<10 {
		t.Fatalf("the bomb is %d bytes", len(z))
	}
	const limit = 100 << 10
	frame := clientFrame(0xC0|OpText, z, true)
	warm := func() { _, _ = runDeflate(frame, 1<<20, nil) } // pools and the decompressor
	warm()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, res := runDeflate(frame, limit+len(frame), nil)
	runtime.ReadMemStats(&after)
	if res != CloseTooBig {
		t.Fatalf("result %d, want 1009", res)
	}
	// The input copy (run copies the frame) and the output up to the limit (with room for
	// its growth, and for what other goroutines of the test binary allocate meanwhile);
	// inflating it whole would allocate 64 MiB and more.
	allocated := after.TotalAlloc - before.TotalAlloc
	if budget := uint64(len(frame) + 40*limit); allocated > budget {
		t.Fatalf("refusing the bomb allocated %d bytes, budget %d", allocated, budget)
	}
	// The same through inflate alone, counted per call.
	allocs := testing.AllocsPerRun(5, func() {
		if out, err := inflate(nil, z, limit); err != errInflatedTooBig || len(out) > limit+1 {
			t.Fatalf("inflate: %v after %d bytes", err, len(out))
		}
	})
	if allocs > 40 {
		t.Fatalf("inflate allocated %.0f times per bomb", allocs)
	}
}

// FuzzDeflateOffer: the extension header parser never panics, and what it accepts names
// permessage-deflate.
func FuzzDeflateOffer(f *testing.F) {
	for _, s := range []string{"permessage-deflate; client_max_window_bits", `permessage-deflate; client_max_window_bits="10", x`,
		"a; b=c, permessage-deflate; server_max_window_bits=15", "permessage-deflate; server_max_window_bits=9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if acceptDeflateOffer([]byte(s)) && !strings.Contains(strings.ToLower(s), "permessage-deflate") {
			t.Fatalf("accepted %q", s)
		}
	})
}

// FuzzInflate: the inflater never panics, never passes its limit, and inflates what the
// standard library's compressor made back to the input.
func FuzzInflate(f *testing.F) {
	f.Add([]byte("hello hello hello"), []byte{0xff, 0x00})
	f.Add(bytes.Repeat([]byte("x"), 3000), []byte{0x4a, 0x4c, 0x4e, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, plain, junk []byte) {
		const limit = 4096
		out, err := inflate(nil, deflateMsg(t, plain), limit)
		switch {
		case len(plain) > limit:
			if err != errInflatedTooBig || len(out) > limit+1 {
				t.Fatalf("%d bytes inflated: err %v, %d out", len(plain), err, len(out))
			}
		case err != nil || !bytes.Equal(out, plain):
			t.Fatalf("round trip: err %v", err)
		}
		if out, _ := inflate(nil, junk, limit); len(out) > limit+1 {
			t.Fatalf("junk inflated past the limit: %d", len(out))
		}
		// Through the frame parser, in pieces.
		_, _ = runDeflate(clientFrame(0xC0|OpText, junk, true), limit, []int{3})
	})
}
