package ws

import (
	"bytes"
	stdflate "compress/flate"
	"fmt"
	"strings"
	"testing"

	kflate "github.com/klauspost/compress/flate"
)

// laravelEvent is a ~2 KiB broadcast as Laravel sends one: an Eloquent model serialized
// into the event's data string (escaped JSON inside the JSON frame).
func laravelEvent() []byte {
	var item strings.Builder
	for i := range 9 {
		fmt.Fprintf(&item, `{\"id\":%d,\"order_id\":48213,\"sku\":\"SKU-%05d\",\"name\":\"Widget %d\",\"quantity\":%d,\"price\":\"19.99\",\"created_at\":\"2026-12-01T20:0%d:00.000000Z\"},`, 1000+i, 31*i, i, i%3+1, i)
	}
	data := `{\"order\":{\"id\":48213,\"user_id\":812,\"status\":\"shipped\",\"total\":\"179.91\",\"currency\":\"EUR\",\"shipping_address\":{\"line1\":\"12 Rue de la Paix\",\"city\":\"Paris\",\"postcode\":\"75002\",\"country\":\"FR\"},\"items\":[` +
		strings.TrimSuffix(item.String(), ",") + `],\"updated_at\":\"2026-12-01T20:10:00.000000Z\"},\"socket\":null}`
	return []byte(`{"event":"App\\Events\\OrderShipped","channel":"private-App.Models.User.812","data":"` + data + `"}`)
}

// BenchmarkDeflateLibraries compresses and inflates one ~2 KiB event per operation
// without context takeover (a fresh stream per message, the compressor reused), with the
// standard library's flate and klauspost/compress's, at levels 1 and 6.
func BenchmarkDeflateLibraries(b *testing.B) {
	msg := laravelEvent()
	for _, level := range []int{1, 6} {
		b.Run(fmt.Sprintf("compress/std/level%d", level), func(b *testing.B) {
			var out bytes.Buffer
			w, _ := stdflate.NewWriter(&out, level)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				w.Reset(&out)
				_, _ = w.Write(msg)
				_ = w.Flush()
			}
			b.ReportMetric(float64(out.Len()-4)/float64(len(msg)), "ratio")
		})
		b.Run(fmt.Sprintf("compress/klauspost/level%d", level), func(b *testing.B) {
			var out bytes.Buffer
			w, _ := kflate.NewWriter(&out, level)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				out.Reset()
				w.Reset(&out)
				_, _ = w.Write(msg)
				_ = w.Flush()
			}
			b.ReportMetric(float64(out.Len()-4)/float64(len(msg)), "ratio")
		})
	}
	z := deflateMsg(b, msg)
	b.Run("inflate/std", func(b *testing.B) {
		src := &inflateSource{}
		r := stdflate.NewReader(src)
		dst := make([]byte, 0, 4096)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			*src = inflateSource{p: z}
			_ = r.(stdflate.Resetter).Reset(src, nil)
			dst = dst[:0]
			for {
				n, err := r.Read(dst[len(dst):cap(dst)])
				dst = dst[:len(dst)+n]
				if err != nil {
					break
				}
			}
		}
	})
	b.Run("inflate/klauspost", func(b *testing.B) {
		dst := make([]byte, 0, 4096)
		b.SetBytes(int64(len(msg)))
		b.ReportAllocs()
		for b.Loop() {
			dst, _ = inflate(dst[:0], z, 1<<20)
		}
	})
}

// BenchmarkDeflaterFrame is the cost of compressing one broadcast's frame (done once per
// broadcast, whatever the number of subscribers that negotiated permessage-deflate).
func BenchmarkDeflaterFrame(b *testing.B) {
	frame := TextFrame(laravelEvent())
	d := NewDeflater(Compression{Enabled: true, MinBytes: 256, Level: 1})
	b.SetBytes(int64(len(frame)))
	b.ReportAllocs()
	var z []byte
	for b.Loop() {
		z = d.Frame(frame)
	}
	b.ReportMetric(float64(len(z))/float64(len(frame)), "ratio")
}
