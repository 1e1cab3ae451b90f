package sog

import (
	"math"
	"unsafe"
)

// descent is the palette's tree laid out flat for finding labels: node v's
// cells' centroids at coarse[v*maxBranch*d:], its children at
// kids[v*maxBranch:], so that a child's place is known, and fetched ahead,
// from its id alone.
type descent struct {
	d         int
	root      int32
	coarse    []float32
	kids      []int32 // an inner node's id, ^i for leaf i, or noKid
	branch    []uint8 // an inner node's cells
	leafBase  []int32 // a leaf's first entry
	leafCount []int32
}

const noKid = math.MinInt32

func flatten(root *pnode, d int) *descent {
	f := &descent{d: d}
	var add func(t *pnode) int32
	add = func(t *pnode) int32 {
		if t.coarse == nil {
			f.leafBase, f.leafCount = append(f.leafBase, int32(t.base)), append(f.leafCount, int32(t.count))
			return ^int32(len(f.leafBase) - 1)
		}
		v := int32(len(f.branch))
		f.branch = append(f.branch, uint8(len(t.kids)))
		f.coarse = append(f.coarse, make([]float32, maxBranch*d)...)
		copy(f.coarse[int(v)*maxBranch*d:], t.coarse)
		for range maxBranch {
			f.kids = append(f.kids, noKid)
		}
		for c, k := range t.kids {
			if k != nil {
				id := add(k)
				f.kids[int(v)*maxBranch+c] = id
			}
		}
		return v
	}
	f.root = add(root)
	return f
}

// step is the child of inner node v that row descends to: its nearest
// cell's.
func (f *descent) step(row []float32, v int32) int32 {
	var buf [maxBranch]float32
	b := int(f.branch[v])
	out := buf[:b]
	sqDists(row, f.coarse[int(v)*maxBranch*f.d:(int(v)*maxBranch+b)*f.d], out)
	ks := f.kids[int(v)*maxBranch : int(v)*maxBranch+b]
	best := -1
	for c, dd := range out {
		if ks[c] != noKid && (best < 0 || dd < out[best]) {
			best = c
		}
	}
	return ks[best]
}

// fetch asks for the memory the next step from v reads: an inner node's
// cells, or a leaf's entries.
func (p *palette) fetch(v int32) {
	f := p.flat
	if v >= 0 {
		prefetchSpan(unsafe.Pointer(&f.coarse[int(v)*maxBranch*f.d]), int(f.branch[v])*f.d*4)
		return
	}
	base, count := int(f.leafBase[^v]), int(f.leafCount[^v])
	prefetchSpan(unsafe.Pointer(&p.entries[base*p.d]), count*p.d*4)
}

// label is the entry of row: the leaf it descends to, the nearest cell at
// each level, then the leaf's nearest entry.
func (p *palette) label(row []float32) uint32 {
	f := p.flat
	v := f.root
	for v >= 0 {
		v = f.step(row, v)
	}
	return p.leafLabel(row, ^v)
}

func (p *palette) leafLabel(row []float32, leaf int32) uint32 {
	base, count := int(p.flat.leafBase[leaf]), int(p.flat.leafCount[leaf])
	c, _ := nearestDist(row, p.entries[base*p.d:(base+count)*p.d], p.d)
	return uint32(base + c)
}

// labelBatch is label for each of rows (at most labelBatchRows), into out:
// the rows descend a level at a time, each one's next node fetched while
// the others' are measured.
func (p *palette) labelBatch(rows [][]float32, out []uint32) {
	f := p.flat
	var cur [labelBatchRows]int32
	for i := range rows {
		cur[i] = f.root
	}
	for more := f.root >= 0; more; {
		more = false
		for i, row := range rows {
			if cur[i] >= 0 {
				cur[i] = f.step(row, cur[i])
				p.fetch(cur[i])
				more = more || cur[i] >= 0
			}
		}
	}
	for i, row := range rows {
		out[i] = p.leafLabel(row, ^cur[i])
	}
}

// labelBatchRows is how many rows labelBatch takes.
const labelBatchRows = 16
