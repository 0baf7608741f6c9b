package jsoncmp

import "testing"

// The benchmarks are named Benchmark<Area>/in=<input>/impl=<variant> so that benchstat can
// put the variants side by side: benchstat -col /impl results.txt

func BenchmarkPusher(b *testing.B) {
	impls := []struct {
		name string
		d    PusherDecoder
	}{{"ours", OursPusher{}}, {"fastjson", &FastjsonPusher{}}, {"sonic", SonicPusher{}}, {"std", StdPusher{}}}
	for _, in := range PusherInputs {
		for _, im := range impls {
			b.Run("in="+in.Name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.Body)))
				for b.Loop() {
					if _, err := im.d.Decode(in.Body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkPage(b *testing.B) {
	inputs, err := PageInputs()
	if err != nil {
		b.Fatal(err)
	}
	impls := []struct {
		name string
		d    PageDecoder
	}{{"ours", OursPage{}}, {"fastjson", &FastjsonPage{}}, {"sonic", SonicPage{}}, {"std", RefPage{}}}
	for _, in := range inputs {
		for _, im := range impls {
			b.Run("in="+in.Name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.Body)))
				for b.Loop() {
					if _, err := im.d.Decode(in.Body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkCall(b *testing.B) {
	impls := []struct {
		name string
		d    CallDecoder
	}{{"ours", OursCall{}}, {"fastjson", &FastjsonCall{}}, {"sonic", SonicCall{}}, {"std", RefCall{}}}
	for _, in := range CallInputs {
		for _, im := range impls {
			b.Run("in="+in.Name+"/impl="+im.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(in.Body)))
				for b.Loop() {
					if _, err := im.d.Decode(in.Body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
