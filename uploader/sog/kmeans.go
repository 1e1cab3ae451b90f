package sog

import (
	"context"
	"math"
	"runtime"
	"sync"
	"unsafe"
)

// The SH palette: every splat's f_rest vector is replaced by the nearest of
// at most 64k entries, found by a tree-structured k-means whose shape was
// chosen by measurement (docs/formats.md, "The SH palette"). Each node's
// random choices come from its own seed, so the palette does not depend on
// scheduling.
const (
	leafK         = 8  // a node with at most this many entries is a leaf
	maxBranch     = 8  // cells an inner node splits into
	sampleFactor  = 32 // an inner node trains on at most this many points a cell
	innerIters    = 4  // Lloyd iterations of an inner node (on its sample)
	leafIters     = 2  // Lloyd iterations of a leaf
	parallelMin   = 1 << 14
	prefetchAhead = 8 // points; a row is three cache lines
)

// paletteSize is the palette size splat-transform chooses for n splats:
// 1024 × the largest power of two ≤ n/1024, at most 64k.
func paletteSize(n int) int {
	k := 1024
	for k*2 <= n && k < 65536 {
		k *= 2
	}
	if n < 1024 { // below 1024 splats, the same rule in fractions
		for k > 1 && k > n {
			k /= 2
		}
		k = max(k, 1)
	}
	return k
}

// palette is the SH palette and the tree it was built as: a splat's entry
// is found by the descent its cell's points took.
type palette struct {
	entries []float32 // row-major, d floats an entry
	d       int
	root    *pnode
	flat    *descent
	labels  []uint32 // each fitted row's entry (what label finds for it)
}

// pnode is a node of the palette's tree: an inner node's cells' centroids
// and children (nil for a cell no point fell in), or a leaf's entries.
type pnode struct {
	coarse      []float32
	kids        []*pnode
	base, count int
}

// fitPalette clusters the n rows of pts (d floats each, a sample of the
// splats) into at most k entries.
func fitPalette(ctx context.Context, pts []float32, n, d, k int) *palette {
	km := &kmeans{ctx: ctx, pts: pts, d: d, sem: make(chan struct{}, runtime.GOMAXPROCS(0))}
	members := make([]uint32, n)
	for i := range members {
		members[i] = uint32(i)
	}
	cs := km.node(members, k, 0x5eed, true, &scratch{})
	p := &palette{d: d, root: cs.tree, labels: make([]uint32, n)}
	for i, m := range members {
		p.labels[m] = cs.labels[i]
	}
	for _, c := range cs.entries {
		p.entries = append(p.entries, c...)
	}
	base := 0
	var number func(*pnode)
	number = func(t *pnode) {
		if t.coarse == nil {
			t.base = base
			base += t.count
			return
		}
		for _, c := range t.kids {
			if c != nil {
				number(c)
			}
		}
	}
	number(p.root)
	p.flat = flatten(p.root, d)
	return p
}

type kmeans struct {
	ctx context.Context // once done, nodes end early (the result is discarded)
	pts []float32
	d   int
	sem chan struct{} // bounds the goroutines of top-level cells
}

// clusters is a node's answer: its entries, its tree and, for each of its
// members in the order given, the entry it belongs to.
type clusters struct {
	entries [][]float32
	tree    *pnode
	labels  []uint32
}

func (km *kmeans) row(i uint32) []float32 { return km.pts[int(i)*km.d : int(i+1)*km.d] }

// scratch is one goroutine's work memory, reused from node to node: the
// nodes of a subtree run one after another. (Allocated afresh, it was
// about 0.7 GB a 1 M-splat palette, which the collector held near live
// memory returned to the system and the next node faulted in again.)
type scratch struct {
	rows   []float32 // a node's gathered rows
	labels []int
	best   []float64
	dist   []float32
}

// grown is s with length n, reallocated only when too short.
func grown[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// node clusters members into at most k entries; top runs its cells in
// parallel. It may reorder members.
func (km *kmeans) node(members []uint32, k int, seed uint64, top bool, sc *scratch) clusters {
	n := len(members)
	if n <= k {
		cs := clusters{tree: &pnode{count: n}, labels: make([]uint32, n)}
		for i, m := range members {
			cs.entries = append(cs.entries, append([]float32(nil), km.row(m)...))
			cs.labels[i] = uint32(i)
		}
		return cs
	}
	if k <= leafK || km.ctx.Err() != nil {
		return km.leaf(members, min(k, leafK), seed, sc)
	}
	branch := min(maxBranch, (k+leafK-1)/leafK)
	r := rng(seed)
	sample := samplePoints(members, branch*sampleFactor, &r)
	coarse := lloyd(km.gather(sample, sc), len(sample), km.d, branch, innerIters, &r, sc)
	cell := km.assign(members, coarse, top && n >= parallelMin)
	cells := groupBy(members, cell, len(coarse)/km.d)
	shares := apportion(cells, k)
	results := make([]clusters, len(cells))
	var wg sync.WaitGroup
	for c := range cells {
		if len(cells[c]) == 0 {
			continue
		}
		childSeed := seed*0x9e3779b97f4a7c15 + uint64(c) + 1
		if !top {
			results[c] = km.node(cells[c], shares[c], childSeed, false, sc)
			continue
		}
		wg.Add(1)
		km.sem <- struct{}{}
		go func() {
			defer func() { <-km.sem; wg.Done() }()
			results[c] = km.node(cells[c], shares[c], childSeed, false, &scratch{})
		}()
	}
	wg.Wait()
	// members now lists cell 0's points, then cell 1's, ... (groupBy).
	out := clusters{tree: &pnode{coarse: coarse, kids: make([]*pnode, len(cells))}, labels: make([]uint32, 0, n)}
	for c, res := range results {
		base := uint32(len(out.entries))
		out.entries = append(out.entries, res.entries...)
		out.tree.kids[c] = res.tree
		for _, l := range res.labels {
			out.labels = append(out.labels, base+l)
		}
	}
	return out
}

// leaf runs Lloyd's algorithm on the members' own rows.
func (km *kmeans) leaf(members []uint32, k int, seed uint64, sc *scratch) clusters {
	r := rng(seed)
	pts := km.gather(members, sc)
	cent := lloyd(pts, len(members), km.d, k, leafIters, &r, sc)
	cs := clusters{tree: &pnode{count: len(cent) / km.d}, labels: make([]uint32, len(members))}
	for i := range members {
		cs.labels[i] = uint32(nearest(pts[i*km.d:(i+1)*km.d], cent, km.d))
	}
	for c := 0; c*km.d < len(cent); c++ {
		cs.entries = append(cs.entries, cent[c*km.d:(c+1)*km.d])
	}
	return cs
}

// gather copies the members' rows into sc.rows and returns them.
func (km *kmeans) gather(members []uint32, sc *scratch) []float32 {
	sc.rows = grown(sc.rows, len(members)*km.d)
	for i, m := range members {
		copy(sc.rows[i*km.d:(i+1)*km.d], km.row(m))
	}
	return sc.rows
}

// assign finds each member's nearest row of cent, on every core if parallel.
func (km *kmeans) assign(members []uint32, cent []float32, parallel bool) []int32 {
	out := make([]int32, len(members))
	workers := 1
	if parallel {
		workers = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	chunk := (len(members) + workers - 1) / workers
	for w := 0; w < workers; w++ {
		lo, hi := w*chunk, min(len(members), (w+1)*chunk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				if i+prefetchAhead < hi {
					prefetch(&km.pts[int(members[i+prefetchAhead])*km.d])
				}
				out[i] = int32(nearest(km.row(members[i]), cent, km.d))
			}
		}()
	}
	wg.Wait()
	return out
}

// groupBy reorders members by cell (stably) and returns each cell's slice.
func groupBy(members []uint32, cell []int32, cells int) [][]uint32 {
	counts := make([]int, cells+1)
	for _, c := range cell {
		counts[c+1]++
	}
	for c := 1; c <= cells; c++ {
		counts[c] += counts[c-1]
	}
	sorted := make([]uint32, len(members))
	pos := append([]int(nil), counts[:cells]...)
	for i, m := range members {
		sorted[pos[cell[i]]] = m
		pos[cell[i]]++
	}
	copy(members, sorted)
	out := make([][]uint32, cells)
	for c := 0; c < cells; c++ {
		out[c] = members[counts[c]:counts[c+1]]
	}
	return out
}

// apportion shares k entries among cells in proportion to their sizes
// (largest remainder), each non-empty cell at least one and at most its
// own size.
func apportion(cells [][]uint32, k int) []int {
	n := 0
	for _, c := range cells {
		n += len(c)
	}
	shares := make([]int, len(cells))
	rem := make([]float64, len(cells))
	total := 0
	for i, c := range cells {
		if len(c) == 0 {
			continue
		}
		exact := float64(k) * float64(len(c)) / float64(n)
		shares[i] = min(len(c), max(1, int(exact)))
		rem[i] = exact - float64(shares[i])
		total += shares[i]
	}
	for total < k {
		best := -1
		for i, c := range cells {
			if shares[i] < len(c) && (best < 0 || rem[i] > rem[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		shares[best]++
		rem[best]--
		total++
	}
	for total > k {
		best := 0
		for i := range shares {
			if shares[i] > shares[best] {
				best = i
			}
		}
		shares[best]--
		total--
	}
	return shares
}

// samplePoints picks at most m of members at random (a partial shuffle of
// a copy).
func samplePoints(members []uint32, m int, r *rng) []uint32 {
	if len(members) <= m {
		return members
	}
	s := append([]uint32(nil), members...)
	for i := 0; i < m; i++ {
		j := i + int(r.next()%uint64(len(s)-i))
		s[i], s[j] = s[j], s[i]
	}
	return s[:m]
}

// refineScale is the fixed point the refinement sums rows in: integer sums
// do not depend on the order they are added in, so the entries do not
// depend on how the splats were shared among the cores.
const refineScale = 1 << 20

// refiner sums the rows that descend to each entry (one core's share).
type refiner struct {
	sums   []int64
	counts []int64
}

func (p *palette) newRefiner() *refiner {
	k := len(p.entries) / p.d
	return &refiner{sums: make([]int64, k*p.d), counts: make([]int64, k)}
}

// add counts row, whose entry is l; non-finite values are left out.
// Each value is rounded half away from zero: v·refineScale ± 0.5 is exact
// in a float64 (24 significant bits below 2⁵⁰), so truncating it rounds.
func (r *refiner) add(row []float32, l uint32, d int) {
	s := r.sums[int(l)*d : int(l+1)*d]
	s = s[:len(row)]
	for j, v := range row {
		if f := float64(v) * refineScale; f > -1e15 && f < 1e15 {
			s[j] += int64(f + math.Copysign(0.5, f))
		}
	}
	r.counts[l]++
}

// fetch asks for the sums add(_, l, d) will change.
func (r *refiner) fetch(l uint32, d int) { prefetchSpan(unsafe.Pointer(&r.sums[int(l)*d]), d*8) }

// refine moves each entry to the mean of the rows the refiners counted for
// it (one Lloyd update over the whole scene, the descent kept); an entry
// no row reached keeps its place.
func (p *palette) refine(rs []*refiner) {
	d := p.d
	for c := 0; c*d < len(p.entries); c++ {
		var n int64
		for _, r := range rs {
			n += r.counts[c]
		}
		if n == 0 {
			continue
		}
		for j := 0; j < d; j++ {
			var s int64
			for _, r := range rs {
				s += r.sums[c*d+j]
			}
			p.entries[c*d+j] = float32(float64(s) / refineScale / float64(n))
		}
	}
}
