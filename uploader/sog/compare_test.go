package sog

import (
	"math"
	"slices"
)

// matchByPosition maps each decoded splat to the source splat nearest in
// position (a grid of source positions makes it linear): match[i] is the
// source index of decoded splat i.
func matchByPosition(src, got *Splats) []int {
	const cell = 0.05
	key := func(p []float32) [3]int {
		return [3]int{int(math.Floor(float64(p[0]) / cell)), int(math.Floor(float64(p[1]) / cell)), int(math.Floor(float64(p[2]) / cell))}
	}
	grid := map[[3]int][]int{}
	for i := 0; i < src.N; i++ {
		k := key(src.Pos[3*i:])
		grid[k] = append(grid[k], i)
	}
	match := make([]int, got.N)
	for i := 0; i < got.N; i++ {
		p := got.Pos[3*i : 3*i+3]
		k := key(p)
		best, bestD := -1, math.Inf(1)
		for r := 1; best < 0 && r < 64; r *= 2 {
			for dx := -r; dx <= r; dx++ {
				for dy := -r; dy <= r; dy++ {
					for dz := -r; dz <= r; dz++ {
						for _, j := range grid[[3]int{k[0] + dx, k[1] + dy, k[2] + dz}] {
							if d := float64(sqDist(p, src.Pos[3*j:3*j+3])); d < bestD {
								best, bestD = j, d
							}
						}
					}
				}
			}
		}
		match[i] = best
	}
	return match
}

// groupRMSE is the RMSE of got against src per attribute group, with
// got's splat i matched to src's match[i]; rotations are compared as unit
// quaternions up to sign, opacity after the sigmoid.
func groupRMSE(src, got *Splats, match []int) map[string]float64 {
	sums := map[string]float64{}
	counts := map[string]float64{}
	add := func(g string, a, b float64) {
		sums[g] += (a - b) * (a - b)
		counts[g]++
	}
	sig := func(v float32) float64 { return 1 / (1 + math.Exp(-float64(v))) }
	rest := RestCount(min(src.Bands, got.Bands))
	for i, j := range match {
		if j < 0 {
			continue
		}
		for a := 0; a < 3; a++ {
			add("positions", float64(got.Pos[3*i+a]), float64(src.Pos[3*j+a]))
			add("dc", float64(got.DC[a][i]), float64(src.DC[a][j]))
			add("scales", float64(got.Scale[a][i]), float64(src.Scale[a][j]))
		}
		add("opacity", sig(got.Opacity[i]), sig(src.Opacity[j]))
		qa, qb := unitQuat(got, i), unitQuat(src, j)
		dot := 0.0
		for c := range qa {
			dot += qa[c] * qb[c]
		}
		sign := 1.0
		if dot < 0 {
			sign = -1
		}
		for c := range qa {
			add("rotations", qa[c], sign*qb[c])
		}
		for k := 0; k < rest; k++ {
			add("shrest", float64(got.Rest[i*RestCount(got.Bands)+k]), float64(src.Rest[j*RestCount(src.Bands)+k]))
		}
	}
	out := map[string]float64{}
	for _, g := range slices.Sorted(mapsKeys(sums)) {
		out[g] = math.Sqrt(sums[g] / counts[g])
	}
	return out
}

func mapsKeys(m map[string]float64) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func unitQuat(s *Splats, i int) [4]float64 {
	var q [4]float64
	l := 0.0
	for c := range q {
		q[c] = float64(s.Rot[c][i])
		l += q[c] * q[c]
	}
	l = math.Sqrt(l)
	for c := range q {
		q[c] /= l
	}
	return q
}
