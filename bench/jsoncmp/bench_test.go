package jsoncmp

import "testing"

// The benchmarks are named Benchmark<Area>/in=<input>/impl=<variant> so that benchstat can
// put the variants side by side: benchstat -col /impl results.txt

// impl is one decoder variant under a benchstat name.
type impl[D any] struct {
	name string
	d    D
}

// benchDecoders runs every input through every variant's decode.
func benchDecoders[D any, R any](b *testing.B, inputs []Input, impls []impl[D], decode func(D, []byte) (R, error)) {
	for _, in := range inputs {
		for _, im := range impls {
			b.Run("in="+in.Name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.Body)))
				for b.Loop() {
					if _, err := decode(im.d, in.Body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPusher(b *testing.B) {
	benchDecoders(b, PusherInputs, []impl[PusherDecoder]{{"ours", OursPusher{}}, {"fastjson", &FastjsonPusher{}},
		{"sonic", SonicPusher{}}, {"std", StdPusher{}}}, PusherDecoder.Decode)
}

// BenchmarkPage has no std variant: bridge's own BenchmarkDecodePageMessage compares ours with
// the encoding/json reference, which is unexported.
func BenchmarkPage(b *testing.B) {
	inputs, err := PageInputs()
	if err != nil {
		b.Fatal(err)
	}
	benchDecoders(b, inputs, []impl[PageDecoder]{{"ours", OursPage{}}, {"fastjson", &FastjsonPage{}},
		{"sonic", SonicPage{}}}, PageDecoder.Decode)
}
