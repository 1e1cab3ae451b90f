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
// The rows' labels are sc's.
func lloyd(pts []float32, n, d, k int, iters int, r *rng, sc *scratch) (cent []float32) {
	cent = seedPlusPlus(pts, n, d, k, r, sc)
	sc.labels = grown(sc.labels, n)
	labels := sc.labels
	clear(labels)
	sums := make([]float64, k*d)
	counts := make([]int, k)
	for it := 0; it < iters; it++ {
		changed := false
		farthest, farD := 0, float32(-1)
		for i := 0; i < n; i++ {
			p := pts[i*d : (i+1)*d]
			c, dd := nearestDist(p, cent, d)
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
	return cent
}

// seedPlusPlus picks k starting centroids among the rows, each next one
// with probability proportional to its squared distance from the nearest
// one already picked.
func seedPlusPlus(pts []float32, n, d, k int, r *rng, sc *scratch) []float32 {
	cent := make([]float32, 0, k*d)
	first := int(r.next() % uint64(n))
	cent = append(cent, pts[first*d:(first+1)*d]...)
	sc.best, sc.dist = grown(sc.best, n), grown(sc.dist, n)
	best, dist := sc.best, sc.dist
	sqDists(cent[:d], pts[:n*d], dist)
	for i := range best {
		best[i] = float64(dist[i])
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
		sqDists(row, pts[:n*d], dist)
		for i, dd := range dist {
			best[i] = min(best[i], float64(dd))
		}
	}
	return cent
}

// nearest is the index of the row of cent nearest to p; ties go to the
// lowest index.
func nearest(p, cent []float32, d int) int { c, _ := nearestDist(p, cent, d); return c }

// nearestDist is nearest and the squared distance to that row. Every row
// is measured in full (a few rows, in one call of the kernel: cheaper than
// ending a distance early, whose branch the processor mispredicts), eight
// rows a call, with nothing allocated.
func nearestDist(p, cent []float32, d int) (int, float32) {
	var buf [maxBranch]float32
	k := len(cent) / d
	best, bestD := 0, float32(math.Inf(1))
	for c0 := 0; c0 < k; c0 += maxBranch {
		m := min(maxBranch, k-c0)
		out := buf[:m]
		sqDists(p, cent[c0*d:(c0+m)*d], out)
		for c, dd := range out {
			if dd < bestD {
				best, bestD = c0+c, dd
			}
		}
	}
	return best, bestD
}
