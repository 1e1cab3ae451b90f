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
		for _, k := range []int{1, 2, 7, 8, 9, 16, 23} {
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

// TestRefinerRounds checks refiner.add's rounding against math.Round on
// values that fall on halves, near them and across the magnitudes.
func TestRefinerRounds(t *testing.T) {
	t.Parallel()
	r := rng(11)
	for i := 0; i < 200000; i++ {
		var v float32
		switch i % 4 {
		case 0:
			v = (float32(int32(r.next()%1e6)-5e5) + 0.5) / refineScale
		case 1:
			v = math.Nextafter32((float32(int32(r.next()%1e6)-5e5)+0.5)/refineScale, float32(r.next()%2)*2-1)
		case 2:
			v = math.Float32frombits(uint32(r.next()))
		default:
			v = float32((r.unit() - 0.5) * math.Pow(10, float64(r.next()%14)-6))
		}
		rf := &refiner{sums: make([]int64, 1), counts: make([]int64, 1)}
		rf.add([]float32{v}, 0, 1)
		var want int64
		if f := float64(v) * refineScale; f > -1e15 && f < 1e15 {
			want = int64(math.Round(f))
		}
		if rf.sums[0] != want {
			t.Fatalf("%g (%#x): add sums %d, math.Round %d", v, math.Float32bits(v), rf.sums[0], want)
		}
	}
}
