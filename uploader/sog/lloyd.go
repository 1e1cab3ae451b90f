package sog

import "math"

// rng is a xorshift generator: the same seed gives the same palette on
// every Go version and machine.
type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	if x == 0 {
		x = 0x9e3779b97f4a7c15
	}
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return x
}

// unit is a uniform float64 in [0, 1).
func (r *rng) unit() float64 { return float64(r.next()>>11) / (1 << 53) }

// lloyd clusters the n rows of pts (d floats each) into k ≤ n centroids:
// k-means++ seeding, then iters rounds of assignment and update. An
// emptied centroid moves to the point farthest from its own centroid.
func lloyd(pts []float32, n, d, k int, iters int, r *rng) (cent []float32, labels []int) {
	cent = seedPlusPlus(pts, n, d, k, r)
	labels = make([]int, n)
	sums := make([]float64, k*d)
	counts := make([]int, k)
	for it := 0; it < iters; it++ {
		changed := false
		farthest, farD := 0, float32(-1)
		for i := 0; i < n; i++ {
			p := pts[i*d : (i+1)*d]
			c, dd := nearestDist(p, cent, d, labels[i])
			if c != labels[i] || it == 0 {
				changed = true
			}
			labels[i] = c
			if dd > farD {
				farthest, farD = i, dd
			}
		}
		if !changed {
			break
		}
		clear(sums)
		clear(counts)
		for i := 0; i < n; i++ {
			c := labels[i]
			counts[c]++
			for j, v := range pts[i*d : (i+1)*d] {
				sums[c*d+j] += float64(v)
			}
		}
		for c := 0; c < k; c++ {
			if counts[c] == 0 {
				copy(cent[c*d:(c+1)*d], pts[farthest*d:(farthest+1)*d])
				continue
			}
			inv := 1 / float64(counts[c])
			for j := 0; j < d; j++ {
				cent[c*d+j] = float32(sums[c*d+j] * inv)
			}
		}
	}
	return cent, labels
}

// seedPlusPlus picks k starting centroids among the rows, each next one
// with probability proportional to its squared distance from the nearest
// one already picked.
func seedPlusPlus(pts []float32, n, d, k int, r *rng) []float32 {
	cent := make([]float32, 0, k*d)
	first := int(r.next() % uint64(n))
	cent = append(cent, pts[first*d:(first+1)*d]...)
	best := make([]float64, n)
	for i := range best {
		best[i] = float64(sqDist(pts[i*d:(i+1)*d], cent[:d], math.MaxFloat32))
	}
	for c := 1; c < k; c++ {
		total := 0.0
		for _, b := range best {
			total += b
		}
		pick := n - 1
		if total > 0 {
			target := r.unit() * total
			for i, b := range best {
				if target -= b; target < 0 {
					pick = i
					break
				}
			}
		} else {
			pick = int(r.next() % uint64(n))
		}
		row := pts[pick*d : (pick+1)*d]
		cent = append(cent, row...)
		for i := range best {
			if best[i] == 0 {
				continue
			}
			if dd := float64(sqDist(pts[i*d:(i+1)*d], row, float32(best[i]))); dd < best[i] {
				best[i] = dd
			}
		}
	}
	return cent
}

// nearest is the index of the row of cent nearest to p.
func nearest(p, cent []float32, d int) int { c, _ := nearestDist(p, cent, d, 0); return c }

// nearestFrom is nearest, measuring row hint first: when hint is already
// near (the last round's answer), the bound it gives ends most other rows'
// distances after a few coefficients. Ties go to the lowest index.
func nearestFrom(p, cent []float32, d, hint int) int { c, _ := nearestDist(p, cent, d, hint); return c }

// nearestDist is nearestFrom and the squared distance to that row.
func nearestDist(p, cent []float32, d, hint int) (int, float32) {
	best, bestD := hint, sqDist(p, cent[hint*d:(hint+1)*d], math.MaxFloat32)
	for c := 0; c*d < len(cent); c++ {
		if c == hint {
			continue
		}
		if dd := sqDist(p, cent[c*d:(c+1)*d], bestD); dd < bestD || (dd == bestD && c < best) {
			best, bestD = c, dd
		}
	}
	return best, bestD
}

// sqDist is the squared distance of a and b, or some value > limit once
// the partial sum passes it (the caller only wants a nearer one or an equal
// one, which must be exact).
func sqDist(a, b []float32, limit float32) float32 {
	b = b[:len(a)]
	var s float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		x, y := a[i:i+8:i+8], b[i:i+8:i+8] // one bounds check for eight
		d0, d1, d2, d3 := x[0]-y[0], x[1]-y[1], x[2]-y[2], x[3]-y[3]
		d4, d5, d6, d7 := x[4]-y[4], x[5]-y[5], x[6]-y[6], x[7]-y[7]
		s += (d0*d0 + d1*d1) + (d2*d2 + d3*d3) + (d4*d4 + d5*d5) + (d6*d6 + d7*d7)
		if s > limit {
			return s
		}
	}
	for ; i < len(a); i++ {
		d := a[i] - b[i]
		s += d * d
	}
	return s
}
