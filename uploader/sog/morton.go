package sog

import (
	"math"
	"math/bits"
)

// morton orders splats along a Z-order curve of their positions, so that
// neighbours in space are neighbours in the images and compress well. A
// splat's key is its Morton code above its index, in one uint64: the
// index takes the bits n needs, each axis a third of the rest (at most 21),
// so sorting the keys is a stable sort by code that needs no other array.
type morton struct {
	idxBits uint
	axBits  uint
	lo      [3]float64
	mul     [3]float64
}

func newMorton(n int, lo, hi [3]float64) *morton {
	m := &morton{idxBits: uint(bits.Len(uint(max(1, n-1))))}
	m.axBits = min(21, (64-m.idxBits)/3)
	cells := float64(uint64(1) << m.axBits)
	for a := 0; a < 3; a++ {
		m.lo[a] = lo[a]
		if l := hi[a] - lo[a]; l > 0 && !math.IsInf(l, 0) {
			m.mul[a] = cells / l
		}
	}
	return m
}

// key is the sort key of splat i at p (x, y, z).
func (m *morton) key(p []float32, i int) uint64 {
	var code uint64
	top := float64(uint64(1)<<m.axBits - 1)
	for a := 0; a < 3; a++ {
		// The first pass found every position finite, so x is not NaN.
		x := (float64(p[a]) - m.lo[a]) * m.mul[a]
		x = min(top, max(0, x))
		code |= spread21(uint64(x)) << a
	}
	return code<<m.idxBits | uint64(i)
}

// sort sorts keys ascending by their code bits, stably (least significant
// digit first, 11 bits a pass).
func (m *morton) sort(keys []uint64) {
	tmp := make([]uint64, len(keys))
	var counts [1 << 11]int
	src, dst := keys, tmp
	for shift := m.idxBits; shift < m.idxBits+3*m.axBits; shift += 11 {
		clear(counts[:])
		for _, k := range src {
			counts[k>>shift&0x7ff]++
		}
		sum := 0
		for d := range counts {
			counts[d], sum = sum, sum+counts[d]
		}
		for _, k := range src {
			d := k >> shift & 0x7ff
			dst[counts[d]] = k
			counts[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &keys[0] {
		copy(keys, src)
	}
}

// spread21 puts the 21 low bits of v three bits apart.
func spread21(v uint64) uint64 {
	v &= 0x1fffff
	v = (v | v<<32) & 0x1f00000000ffff
	v = (v | v<<16) & 0x1f0000ff0000ff
	v = (v | v<<8) & 0x100f00f00f00f00f
	v = (v | v<<4) & 0x10c30c30c30c30c3
	v = (v | v<<2) & 0x1249249249249249
	return v
}
