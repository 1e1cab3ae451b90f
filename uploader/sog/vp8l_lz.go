package sog

import (
	"math"
	"math/bits"
)

// The VP8L image data: backward references found greedily, the colour
// cache's size chosen by the symbols' entropy, and the symbols written.

// copyRef is a backward reference: length pixels from dist pixels back,
// dist written as code (distCodes).
type copyRef struct{ pos, length, dist, code uint32 }

// findCopies finds greedy backward references among the previous pixel,
// the pixel above and the last place the next two pixels occurred.
func findCopies(p []uint32, w int) []copyRef {
	var refs []copyRef
	table := make([]int32, 1<<hashBits)
	for i := range table {
		table[i] = -1
	}
	hash := func(i int) uint32 { return (p[i]*0x9e3779b1 ^ p[i+1]*0x85ebca77) >> (32 - hashBits) }
	matchLen := func(i, j int) int {
		n := min(maxCopy, len(p)-i)
		l := 0
		for l < n && p[i+l] == p[j+l] {
			l++
		}
		return l
	}
	short := distCodes(w)
	for i := 0; i+minCopy <= len(p); {
		h := hash(i)
		cand := int(table[h])
		table[h] = int32(i)
		bestL, bestD := 0, 0
		for _, j := range [3]int{i - 1, i - w, cand} {
			if j >= 0 && j < i && i-j <= maxDist && p[j] == p[i] {
				if l := matchLen(i, j); l > bestL {
					bestL, bestD = l, i-j
				}
			}
		}
		if bestL < minCopy {
			i++
			continue
		}
		code, ok := short[uint32(bestD)]
		if !ok {
			code = uint32(bestD) + 120
		}
		refs = append(refs, copyRef{uint32(i), uint32(bestL), uint32(bestD), code})
		for k := i + 1; k < i+bestL && k+1 < len(p); k++ {
			table[hash(k)] = int32(k)
		}
		i += bestL
	}
	return refs
}

// prefixCode is the VP8L prefix code of v ≥ 1 and its extra bits.
func prefixCode(v uint32) (code, nExtra, extra uint32) {
	d := v - 1
	if d < 4 {
		return d, 0, 0
	}
	h := uint32(bits.Len32(d)) - 1
	second := d >> (h - 1) & 1
	nExtra = h - 1
	return 2*h + second, nExtra, d & (1<<nExtra - 1)
}

// distanceMapTable is RFC 9649's table of the 120 short distance codes:
// code c+1 is (y << 4) | (8 - x) for the pixel x to the left (negative:
// right) and y rows up.
var distanceMapTable = [120]uint8{
	0x18, 0x07, 0x17, 0x19, 0x28, 0x06, 0x27, 0x29, 0x16, 0x1a,
	0x26, 0x2a, 0x38, 0x05, 0x37, 0x39, 0x15, 0x1b, 0x36, 0x3a,
	0x25, 0x2b, 0x48, 0x04, 0x47, 0x49, 0x14, 0x1c, 0x35, 0x3b,
	0x46, 0x4a, 0x24, 0x2c, 0x58, 0x45, 0x4b, 0x34, 0x3c, 0x03,
	0x57, 0x59, 0x13, 0x1d, 0x56, 0x5a, 0x23, 0x2d, 0x44, 0x4c,
	0x55, 0x5b, 0x33, 0x3d, 0x68, 0x02, 0x67, 0x69, 0x12, 0x1e,
	0x66, 0x6a, 0x22, 0x2e, 0x54, 0x5c, 0x43, 0x4d, 0x65, 0x6b,
	0x32, 0x3e, 0x78, 0x01, 0x77, 0x79, 0x53, 0x5d, 0x11, 0x1f,
	0x64, 0x6c, 0x42, 0x4e, 0x76, 0x7a, 0x21, 0x2f, 0x75, 0x7b,
	0x31, 0x3f, 0x63, 0x6d, 0x52, 0x5e, 0x00, 0x74, 0x7c, 0x41,
	0x4f, 0x10, 0x20, 0x62, 0x6e, 0x30, 0x73, 0x7d, 0x51, 0x5f,
	0x40, 0x72, 0x7e, 0x61, 0x6f, 0x50, 0x71, 0x7f, 0x60, 0x70,
}

// distCodes maps a distance to the smallest short code that means it in an
// image w wide; other distances d are coded as d + 120.
func distCodes(w int) map[uint32]uint32 {
	m := map[uint32]uint32{}
	for c := len(distanceMapTable); c >= 1; c-- {
		dc := int(distanceMapTable[c-1])
		d := (dc>>4)*w + 8 - dc&0xf
		if d >= 1 {
			m[uint32(d)] = uint32(c)
		}
	}
	return m
}

// cacheKey is pixel p's slot in a colour cache of 1<<cb entries (cb ≥ 1).
func cacheKey(p uint32, cb uint) uint32 { return (p * 0x1e35a7bd) >> (32 - cb) }

// histogram is the symbols' counts of the five alphabets at one colour
// cache size and their estimated size in bits.
type histogram struct {
	cbits  uint
	counts [5][]uint32
	bits   float64
}

// histograms counts an image's symbols (its pixels and refs) at each of
// cbs cache bits, in one walk: the references' symbols are the same at
// every size, only the literals and cache hits differ.
func histograms(img []uint32, refs []copyRef, cbs []uint) []*histogram {
	hs, caches := emptyHistograms(cbs)
	var lenCounts [numLenCodes]uint32
	var distCounts [numDistCodes]uint32
	extra := 0
	r := 0
	for i := 0; i < len(img); {
		if r < len(refs) && int(refs[r].pos) == i {
			ref := refs[r]
			r++
			c, ne, _ := prefixCode(ref.length)
			lenCounts[c]++
			extra += int(ne)
			c, ne, _ = prefixCode(ref.code)
			distCounts[c]++
			extra += int(ne)
			for k, cache := range caches {
				if cb := cbs[k]; cb > 0 {
					for _, p := range img[i : i+int(ref.length)] {
						cache[cacheKey(p, cb)] = p
					}
				}
			}
			i += int(ref.length)
			continue
		}
		p := img[i]
		for k, h := range hs {
			if cb := h.cbits; cb > 0 {
				key := cacheKey(p, cb)
				if caches[k][key] == p {
					h.counts[0][256+numLenCodes+key]++
					continue
				}
				caches[k][key] = p
			}
			h.counts[0][p>>8&0xff]++
			h.counts[1][p>>16&0xff]++
			h.counts[2][p&0xff]++
			h.counts[3][p>>24]++
		}
		i++
	}
	for _, h := range hs {
		h.addRefs(&lenCounts, &distCounts, extra)
	}
	return hs
}

// emptyHistograms is a zeroed histogram and colour cache for each of cbs
// cache bits (no cache at 0).
func emptyHistograms(cbs []uint) ([]*histogram, [][]uint32) {
	hs := make([]*histogram, len(cbs))
	caches := make([][]uint32, len(cbs))
	for k, cb := range cbs {
		h := &histogram{cbits: cb}
		sizes := [5]int{256 + numLenCodes, 256, 256, 256, numDistCodes}
		if cb > 0 {
			sizes[0] += 1 << cb
			caches[k] = make([]uint32, 1<<cb)
		}
		for a := range h.counts {
			h.counts[a] = make([]uint32, sizes[a])
		}
		hs[k] = h
	}
	return hs, caches
}

// addRefs adds the references' length and distance codes and their extra
// bits to h and sets h.bits.
func (h *histogram) addRefs(lenCounts *[numLenCodes]uint32, distCounts *[numDistCodes]uint32, extra int) {
	for c, n := range lenCounts {
		h.counts[0][256+c] += n
	}
	for c, n := range distCounts {
		h.counts[4][c] += n
	}
	h.bits = float64(extra)
	for _, c := range h.counts {
		h.bits += entropyBits(c)
	}
}

// entropyBits is the Shannon size of a histogram's symbols.
func entropyBits(c []uint32) float64 {
	n := 0.0
	for _, v := range c {
		n += float64(v)
	}
	bitsSum := 0.0
	for _, v := range c {
		if v > 0 {
			bitsSum -= float64(v) * math.Log2(float64(v)/n)
		}
	}
	return bitsSum
}

// writeImage writes img's pixels as an entropy-coded image (top: the main
// image, with its meta prefix bit).
func writeImage(bw *bitWriter, img *argbImage, top bool) {
	refs := findCopies(img.pix, img.w)
	cbs := []uint{0}
	if top {
		cbs = []uint{0, 6, 10}
	}
	hs := histograms(img.pix, refs, cbs)
	best := hs[0]
	for _, h := range hs[1:] {
		if h.bits < best.bits {
			best = h
		}
	}
	if best.cbits > 0 {
		bw.write(1, 1)
		bw.write(uint64(best.cbits), 4)
	} else {
		bw.write(0, 1)
	}
	if top {
		bw.write(0, 1) // one group of prefix codes
	}
	var codes [5]prefix
	for a := range codes {
		codes[a] = writePrefix(bw, best.counts[a])
	}
	writeSymbols(bw, img.pix, refs, best.cbits, &codes)
}

// writeSymbols writes the pixels and refs with codes at cb cache bits.
func writeSymbols(bw *bitWriter, img []uint32, refs []copyRef, cb uint, codes *[5]prefix) {
	var cache []uint32
	if cb > 0 {
		cache = make([]uint32, 1<<cb)
	}
	put := func(c *prefix, sym uint32) { bw.write(uint64(c.code[sym]), uint(c.length[sym])) }
	r := 0
	for i := 0; i < len(img); {
		if r < len(refs) && int(refs[r].pos) == i {
			ref := refs[r]
			r++
			c, ne, e := prefixCode(ref.length)
			put(&codes[0], 256+c)
			bw.write(uint64(e), uint(ne))
			c, ne, e = prefixCode(ref.code)
			put(&codes[4], c)
			bw.write(uint64(e), uint(ne))
			if cb > 0 {
				for _, p := range img[i : i+int(ref.length)] {
					cache[cacheKey(p, cb)] = p
				}
			}
			i += int(ref.length)
			continue
		}
		p := img[i]
		i++
		if cb > 0 {
			key := cacheKey(p, cb)
			if cache[key] == p {
				put(&codes[0], 256+numLenCodes+key)
				continue
			}
			cache[key] = p
		}
		put(&codes[0], p>>8&0xff)
		put(&codes[1], p>>16&0xff)
		put(&codes[2], p&0xff)
		put(&codes[3], p>>24)
	}
}
