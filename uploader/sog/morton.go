package sog

import "math"

// mortonOrder returns the splats' order along a Z-order curve of their
// positions (10 bits an axis, inside the bounds of the splats sorted), so
// that neighbours in space are neighbours in the images and compress well.
// A run of more than 256 splats that share one code is ordered again
// inside its own, smaller bounds. The sort is stable: same input, same order.
func mortonOrder(pos []float32, n int) []uint32 {
	idx := make([]uint32, n)
	for i := range idx {
		idx[i] = uint32(i)
	}
	scratch := make([]uint32, n)
	keys := make([]uint32, n)
	keys2 := make([]uint32, n)
	mortonSort(pos, idx, scratch, keys, keys2)
	return idx
}

func mortonSort(pos []float32, idx, scratch, keys, keys2 []uint32) {
	if len(idx) == 0 {
		return
	}
	lo := [3]float64{math.Inf(1), math.Inf(1), math.Inf(1)}
	hi := [3]float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)}
	for _, g := range idx {
		for a := 0; a < 3; a++ {
			v := float64(pos[3*int(g)+a])
			lo[a], hi[a] = math.Min(lo[a], v), math.Max(hi[a], v)
		}
	}
	var mul [3]float64
	same := true
	for a := 0; a < 3; a++ {
		l := hi[a] - lo[a]
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return
		}
		if l > 0 {
			mul[a], same = 1024/l, false
		}
	}
	if same {
		return
	}
	for i, g := range idx {
		var c [3]uint32
		for a := 0; a < 3; a++ {
			c[a] = uint32(math.Min(1023, (float64(pos[3*int(g)+a])-lo[a])*mul[a]))
		}
		keys[i] = spread(c[2])<<2 | spread(c[1])<<1 | spread(c[0])
	}
	radixSort(keys, idx, keys2[:len(idx)], scratch[:len(idx)], 10, 3)
	for start := 0; start < len(idx); {
		end := start + 1
		for end < len(idx) && keys[end] == keys[start] {
			end++
		}
		if end-start > 256 {
			mortonSort(pos, idx[start:end], scratch[start:end], keys[start:end], keys2[start:end])
		}
		start = end
	}
}

// spread puts the 10 low bits of v three bits apart.
func spread(v uint32) uint32 {
	v &= 0x3ff
	v = (v ^ v<<16) & 0xff0000ff
	v = (v ^ v<<8) & 0x0300f00f
	v = (v ^ v<<4) & 0x030c30c3
	v = (v ^ v<<2) & 0x09249249
	return v
}
