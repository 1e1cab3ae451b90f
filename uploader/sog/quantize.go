package sog

import (
	"math"
	"slices"
)

// Codebook quantization: all the values of a group of columns (the three
// log scales, the three DC colours, every SH palette coefficient) share one
// 256-entry codebook of floats, and each value is stored as the index of
// its nearest entry. The codebook is the optimal 1-D k-means of a
// histogram of the values, with sub-linear density weights so that sparse
// tails still earn entries (the approach splat-transform takes, so that our
// error per attribute is comparable to its own).

const (
	codebookSize = 256
	histBins     = 1024
	densityAlpha = 0.5
	// infMargin places the codebook entries for ±Inf this far outside the
	// finite range: JSON cannot carry an infinity.
	infMargin = 20
)

// quantize1D returns a sorted codebook of codebookSize floats for values
// and each value's index into it.
func quantize1D(values []float32) (codebook []float32, labels []uint8) {
	codebook, lk := codebook1D(values)
	labels = make([]uint8, len(values))
	for i, v := range values {
		labels[i] = lk.nearest(v)
	}
	return codebook, labels
}

// codebook1D returns a sorted codebook of codebookSize floats for values
// (a sample of the values it is for) and its lookup.
func codebook1D(values []float32) ([]float32, *lookup) {
	codebook := make([]float32, codebookSize)
	finite := make([]float32, 0, len(values))
	var negInf, posInf bool
	for _, v := range values {
		switch {
		case math.IsInf(float64(v), -1):
			negInf = true
		case math.IsInf(float64(v), 1):
			posInf = true
		case v == v:
			finite = append(finite, v)
		}
	}
	sortFloats(finite)
	lo, hi := 0, 0
	if negInf {
		lo = 1
	}
	if posInf {
		hi = 1
	}
	var centres []float64
	if len(finite) > 0 {
		centres = optimalCentres(finite, codebookSize-lo-hi)
	}
	fill := float32(0)
	if len(centres) > 0 {
		fill = float32(centres[len(centres)-1])
	}
	for i := lo; i < codebookSize-hi; i++ {
		if j := i - lo; j < len(centres) {
			codebook[i] = float32(centres[j])
		} else {
			codebook[i] = fill
		}
	}
	if negInf {
		codebook[0] = firstOr(finite, 0) - infMargin
	}
	if posInf {
		codebook[codebookSize-1] = lastOr(finite, 0) + infMargin
	}
	return codebook, newLookup(codebook)
}

// lookup answers nearestSorted for one codebook from a table of buckets
// over its range: a bucket's start is at or next to the answer, so a value
// takes a step or two rather than eight of a binary search.
type lookup struct {
	cb     []float32
	mids   []float32 // mids[i] is nearestSorted's boundary between entries i and i+1
	lo, hi float32
	scale  float64
	start  []uint8
}

const lookupBuckets = 4096

func newLookup(cb []float32) *lookup {
	lk := &lookup{cb: cb, mids: make([]float32, len(cb)-1), lo: cb[0], hi: cb[len(cb)-1]}
	for i := range lk.mids {
		lk.mids[i] = (cb[i] + cb[i+1]) * 0.5
	}
	if span := float64(lk.hi) - float64(lk.lo); span > 0 && !math.IsInf(span, 0) {
		lk.scale = lookupBuckets / span
		lk.start = make([]uint8, lookupBuckets+1)
		for b := range lk.start {
			lk.start[b] = nearestSorted(cb, float32(float64(lk.lo)+float64(b)/lk.scale))
		}
	}
	return lk
}

// nearest is nearestSorted(lk.cb, v): the number of boundaries at or
// below v, found by walking from the bucket's start.
func (lk *lookup) nearest(v float32) uint8 {
	if lk.start == nil || !(v >= lk.lo && v <= lk.hi) { // NaN, ±Inf, outside
		return nearestSorted(lk.cb, v)
	}
	i := int(lk.start[min(lookupBuckets, int((float64(v)-float64(lk.lo))*lk.scale))])
	for i > 0 && v < lk.mids[i-1] {
		i--
	}
	for i < len(lk.mids) && v >= lk.mids[i] {
		i++
	}
	return uint8(i)
}

func firstOr(s []float32, d float32) float32 {
	if len(s) == 0 {
		return d
	}
	return s[0]
}

func lastOr(s []float32, d float32) float32 {
	if len(s) == 0 {
		return d
	}
	return s[len(s)-1]
}

// nearestSorted is the index of the entry of the ascending codebook cb
// nearest to v (NaN goes to 0).
func nearestSorted(cb []float32, v float32) uint8 {
	lo, hi := 0, len(cb)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if v < (cb[mid]+cb[mid+1])*0.5 {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return uint8(lo)
}

// optimalCentres clusters the sorted finite values into at most k centres
// by dynamic programming over a 1024-bin histogram whose bins blend value
// and rank positions (more rank weight when outliers stretch the range).
func optimalCentres(sorted []float32, k int) []float64 {
	n := len(sorted)
	vMin, vMax := float64(sorted[0]), float64(sorted[n-1])
	if vMax-vMin < 1e-20 {
		return []float64{vMin}
	}
	h := min(histBins, n)
	counts, sums := blendedBins(sorted, h)
	p, nonEmpty := newBinPrefix(counts, sums, vMin, vMax-vMin)
	k = min(k, nonEmpty)
	splits := partitionDP(h, k, p.cost)
	out := make([]float64, k)
	j := h - 1
	for m := k; m >= 1; m-- {
		s := -1
		if m > 1 {
			s = int(splits[m][j])
		}
		out[m-1] = p.mean(s+1, j)
		j = s
	}
	slices.Sort(out)
	return out
}

// blendedBins counts and sums the sorted values in h bins placed by a blend
// of value and rank, more rank as outliers stretch the range.
func blendedBins(sorted []float32, h int) (counts, sums []float64) {
	n := len(sorted)
	vMin := float64(sorted[0])
	vRange := float64(sorted[n-1]) - vMin
	iqr := float64(sorted[n*3/4]) - float64(sorted[n/4])
	beta := math.Max(0.5, math.Min(0.999, 1-iqr/vRange))
	counts = make([]float64, h)
	sums = make([]float64, h)
	for i, v := range sorted {
		u := (float64(v) - vMin) / vRange
		q := float64(i) / float64(n)
		b := min(h-1, int(float64(h)*(beta*q+(1-beta)*u)))
		counts[b]++
		sums[b] += float64(v)
	}
	return counts, sums
}

// binPrefix is a histogram's prefix sums of weight, weighted centre and
// its square, which give a bin range's weighted squared error in O(1).
type binPrefix struct {
	w, wx, wxx []float64
	centre     []float64 // each bin's mean, or its midpoint when empty
}

// newBinPrefix is the prefix sums of the bins over vMin..vMin+vRange and
// the count of bins not empty.
func newBinPrefix(counts, sums []float64, vMin, vRange float64) (binPrefix, int) {
	h := len(counts)
	p := binPrefix{make([]float64, h+1), make([]float64, h+1), make([]float64, h+1), make([]float64, h)}
	nonEmpty := 0
	for i := 0; i < h; i++ {
		w := 0.0
		p.centre[i] = vMin + (float64(i)+0.5)/float64(h)*vRange
		if counts[i] > 0 {
			p.centre[i] = sums[i] / counts[i]
			w = math.Pow(counts[i], densityAlpha)
			nonEmpty++
		}
		c := p.centre[i]
		p.w[i+1], p.wx[i+1], p.wxx[i+1] = p.w[i]+w, p.wx[i]+w*c, p.wxx[i]+w*c*c
	}
	return p, nonEmpty
}

// cost is the weighted squared error of bins a..b inclusive.
func (p binPrefix) cost(a, b int) float64 {
	w := p.w[b+1] - p.w[a]
	if w <= 0 {
		return 0
	}
	wx := p.wx[b+1] - p.wx[a]
	return p.wxx[b+1] - p.wxx[a] - wx*wx/w
}

// mean is the weighted centre of bins a..b inclusive.
func (p binPrefix) mean(a, b int) float64 {
	w := p.w[b+1] - p.w[a]
	if w <= 0 {
		return (p.centre[a] + p.centre[b]) / 2
	}
	return (p.wx[b+1] - p.wx[a]) / w
}

// partitionDP splits bins 0..h-1 into k contiguous ranges of least total
// cost. splits[m][j] is where the last of m ranges ending at bin j starts
// (minus one). The interval cost of 1-D k-means is Monge, so the best split
// is monotone in j and each row is solved by divide and conquer in
// O(h log h) rather than O(h²).
func partitionDP(h, k int, cost func(a, b int) float64) [][]int32 {
	const inf = 1e300
	prev, cur := make([]float64, h), make([]float64, h)
	splits := make([][]int32, k+1)
	for j := 0; j < h; j++ {
		prev[j] = cost(0, j)
	}
	for m := 2; m <= k; m++ {
		row := make([]int32, h)
		for j := range cur {
			cur[j] = inf
		}
		var solve func(jlo, jhi, slo, shi int)
		solve = func(jlo, jhi, slo, shi int) {
			if jlo > jhi {
				return
			}
			j := (jlo + jhi) / 2
			best, bestS := inf, max(slo, m-2)
			for s := max(slo, m-2); s <= min(shi, j-1); s++ {
				if c := prev[s] + cost(s+1, j); c < best {
					best, bestS = c, s
				}
			}
			cur[j], row[j] = best, int32(bestS)
			solve(jlo, j-1, slo, bestS)
			solve(j+1, jhi, bestS, shi)
		}
		solve(m-1, h-1, m-2, h-2)
		splits[m] = row
		prev, cur = cur, prev
	}
	return splits
}

// sortFloats sorts finite floats ascending by a radix sort of their bits
// (three 11-bit passes): the codebooks sort millions of values, where a
// comparison sort was a tenth of the encoder's time.
func sortFloats(v []float32) {
	if len(v) < 1024 {
		slices.Sort(v)
		return
	}
	keys := make([]uint32, len(v))
	for i, f := range v {
		u := math.Float32bits(f)
		if u&0x80000000 != 0 {
			u = ^u
		} else {
			u |= 0x80000000
		}
		keys[i] = u
	}
	radixSort(keys, nil, make([]uint32, len(v)), nil, 11, 3)
	for i, u := range keys {
		if u&0x80000000 != 0 {
			u &^= 0x80000000
		} else {
			u = ^u
		}
		v[i] = math.Float32frombits(u)
	}
}
