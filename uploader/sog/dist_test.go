package sog

import (
	"math"
	"testing"
)

// TestSqDistsMatchGo checks the kernel sqDists uses (the AVX2 one where
// the CPU has it) against sqDistGo bit for bit, for every length of a
// group's tail and rows that straddle them.
func TestSqDistsMatchGo(t *testing.T) {
	t.Parallel()
	r := rng(7)
	val := func() float32 { return float32((r.unit() - 0.5) * math.Pow(10, float64(r.next()%7)-3)) }
	for d := 1; d <= 50; d++ {
		for _, k := range []int{1, 2, 7, 8, 9} {
			p := make([]float32, d)
			rows := make([]float32, k*d)
			for i := range p {
				p[i] = val()
			}
			for i := range rows {
				rows[i] = val()
			}
			out := make([]float32, k)
			sqDists(p, rows, out)
			for c := 0; c < k; c++ {
				want := sqDistGo(p, rows[c*d:(c+1)*d])
				if math.Float32bits(out[c]) != math.Float32bits(want) {
					t.Fatalf("d=%d k=%d row %d: kernel %g, Go %g (AVX2 %v)", d, k, c, out[c], want, haveAVX2)
				}
				var exact float64
				for j := 0; j < d; j++ {
					x := float64(p[j]) - float64(rows[c*d+j])
					exact += x * x
				}
				if math.Abs(float64(want)-exact) > 1e-5*exact+1e-30 {
					t.Fatalf("d=%d row %d: %g, exactly %g", d, c, want, exact)
				}
			}
		}
	}
}
