package sog

import (
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
	"slices"
)

// A lossless WebP (VP8L, RFC 9649) encoder in Go: subtract-green and
// predictor transforms, LZ77 with a colour cache, one group of prefix codes.
// Plain Go arithmetic, so the same bytes on every machine and no executable
// memory to map.

// argbImage is an image of packed pixels, a<<24 | r<<16 | g<<8 | b.
type argbImage struct {
	w, h int
	pix  []uint32
}

func newARGB(w, h int) *argbImage { return &argbImage{w: w, h: h, pix: make([]uint32, w*h)} }

const (
	predBits     = 4 // predictor blocks of 16×16 pixels
	maxCopy      = 4096
	maxDist      = 1<<20 - 120 // the longest distance code 39 holds
	minCopy      = 3
	hashBits     = 18
	numLenCodes  = 24
	numDistCodes = 40
	maxCodeLen   = 15
	maxCLCodeLen = 7
)

// encodeVP8L writes img as a lossless WebP to w. It transforms img.pix in
// place (the image is not usable afterwards).
func encodeVP8L(w io.Writer, img *argbImage) error {
	if img.w < 1 || img.h < 1 || img.w > 16384 || img.h > 16384 || len(img.pix) != img.w*img.h {
		return errors.New("vp8l: bad image size")
	}
	var bw bitWriter
	bw.buf = make([]byte, 0, len(img.pix)/2+1024)
	alpha := uint64(0)
	for _, p := range img.pix {
		if p>>24 != 0xff {
			alpha = 1
			break
		}
	}
	bw.write(0x2f, 8)
	bw.write(uint64(img.w-1), 14)
	bw.write(uint64(img.h-1), 14)
	bw.write(alpha, 1)
	bw.write(0, 3)

	subtractGreen(img.pix)
	bw.write(1, 1)
	bw.write(2, 2)

	modes := choosePredictors(img)
	predict(img, modes)
	bw.write(1, 1)
	bw.write(0, 2)
	bw.write(predBits-2, 3)
	writeImage(&bw, modes, false)

	bw.write(0, 1) // no more transforms
	writeImage(&bw, img, true)
	bw.flush()

	data := bw.buf
	pad := len(data) & 1
	var hdr [20]byte
	copy(hdr[0:], "RIFF")
	binary.LittleEndian.PutUint32(hdr[4:], uint32(12+len(data)+pad))
	copy(hdr[8:], "WEBPVP8L")
	binary.LittleEndian.PutUint32(hdr[16:], uint32(len(data)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	if pad == 1 {
		data = append(data, 0)
	}
	_, err := w.Write(data)
	return err
}

type bitWriter struct {
	buf []byte
	acc uint64
	n   uint
}

// write appends the n (≤ 32) low bits of v.
func (b *bitWriter) write(v uint64, n uint) {
	b.acc |= v << b.n
	b.n += n
	if b.n >= 32 {
		b.buf = binary.LittleEndian.AppendUint32(b.buf, uint32(b.acc))
		b.acc >>= 32
		b.n -= 32
	}
}

func (b *bitWriter) flush() {
	for b.n > 0 {
		b.buf = append(b.buf, byte(b.acc))
		b.acc >>= 8
		b.n -= min(b.n, 8)
	}
}

func subtractGreen(pix []uint32) {
	for i, p := range pix {
		g := p >> 8 & 0xff
		r := (p>>16 - g) & 0xff
		b := (p - g) & 0xff
		pix[i] = p&0xff00ff00 | r<<16 | b
	}
}

func avg2(a, b uint32) uint32 { return ((a^b)&0xfefefefe)>>1 + (a & b) }

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

func sel(l, t, tl uint32) uint32 {
	var pl, pt uint32
	for s := 0; s < 32; s += 8 {
		c, tt, ll := tl>>s&0xff, t>>s&0xff, l>>s&0xff
		pl += absDiff(c, tt)
		pt += absDiff(c, ll)
	}
	if pl < pt {
		return l
	}
	return t
}

func clampFull(a, b, c uint32) uint32 {
	var out uint32
	for s := 0; s < 32; s += 8 {
		x := int32(a>>s&0xff) + int32(b>>s&0xff) - int32(c>>s&0xff)
		out |= uint32(min(255, max(0, x))) << s
	}
	return out
}

func clampHalf(a, b uint32) uint32 {
	var out uint32
	for s := 0; s < 32; s += 8 {
		x, y := int32(a>>s&0xff), int32(b>>s&0xff)
		out |= uint32(min(255, max(0, x+(x-y)/2))) << s
	}
	return out
}

// predictor is the prediction of mode m for pixel i (not in the first
// row or column) of an image w wide.
func predictor(m uint32, p []uint32, i, w int) uint32 {
	switch m {
	case 0:
		return 0xff000000
	case 1:
		return p[i-1]
	case 2:
		return p[i-w]
	case 3:
		return p[i-w+1]
	case 4:
		return p[i-w-1]
	case 5:
		return avg2(avg2(p[i-1], p[i-w+1]), p[i-w])
	case 6:
		return avg2(p[i-1], p[i-w-1])
	case 7:
		return avg2(p[i-1], p[i-w])
	case 8:
		return avg2(p[i-w-1], p[i-w])
	case 9:
		return avg2(p[i-w], p[i-w+1])
	case 10:
		return avg2(avg2(p[i-1], p[i-w-1]), avg2(p[i-w], p[i-w+1]))
	case 11:
		return sel(p[i-1], p[i-w], p[i-w-1])
	case 12:
		return clampFull(p[i-1], p[i-w], p[i-w-1])
	default:
		return clampHalf(avg2(p[i-1], p[i-w]), p[i-w-1])
	}
}

// predictions is every mode's prediction for pixel i (not in the first row
// or column) of an image w wide: predictor's, from one read of the
// neighbours.
func predictions(p []uint32, i, w int) [14]uint32 {
	l, t, tr, tl := p[i-1], p[i-w], p[i-w+1], p[i-w-1]
	return [14]uint32{0xff000000, l, t, tr, tl,
		avg2(avg2(l, tr), t), avg2(l, tl), avg2(l, t), avg2(tl, t), avg2(t, tr),
		avg2(avg2(l, tl), avg2(t, tr)), sel(l, t, tl), clampFull(l, t, tl), clampHalf(avg2(l, t), tl)}
}

// sub is a − b in each channel.
func sub(a, b uint32) uint32 {
	ag := 0x00ff00ff + a&0xff00ff00 - b&0xff00ff00
	rb := 0xff00ff00 + a&0x00ff00ff - b&0x00ff00ff
	return ag&0xff00ff00 | rb&0x00ff00ff
}

// resCost approximates the bits of a residual byte: its magnitude's length.
var resCost = func() (t [256]uint8) {
	for v := range t {
		m := int(int8(uint8(v)))
		if m < 0 {
			m = -m
		}
		t[v] = uint8(bits.Len(uint(m)))
	}
	return t
}()

// choosePredictors picks each block's mode, the one whose residuals are
// smallest on the block's even rows and columns.
func choosePredictors(img *argbImage) *argbImage {
	bs := 1 << predBits
	tw, th := (img.w+bs-1)/bs, (img.h+bs-1)/bs
	modes := newARGB(tw, th)
	var cost [14]int
	for by := 0; by < th; by++ {
		for bx := 0; bx < tw; bx++ {
			clear(cost[:])
			for y := max(1, by*bs); y < min(img.h, (by+1)*bs); y += 2 {
				for x := max(1, bx*bs); x < min(img.w, (bx+1)*bs); x += 2 {
					i := y*img.w + x
					p := img.pix[i]
					for m, pr := range predictions(img.pix, i, img.w) {
						r := sub(p, pr)
						cost[m] += int(resCost[r&0xff]) + int(resCost[r>>8&0xff]) + int(resCost[r>>16&0xff]) + int(resCost[r>>24])
					}
				}
			}
			best := 11
			for m := range cost {
				if cost[m] < cost[best] {
					best = m
				}
			}
			modes.pix[by*tw+bx] = 0xff000000 | uint32(best)<<8
		}
	}
	return modes
}

// predict replaces each pixel by its residual, last pixel first, so that
// every prediction reads original pixels.
func predict(img *argbImage, modes *argbImage) {
	w, p := img.w, img.pix
	for i := len(p) - 1; i > 0; i-- {
		x, y := i%w, i/w
		var pr uint32
		switch {
		case y == 0:
			pr = p[i-1]
		case x == 0:
			pr = p[i-w]
		default:
			pr = predictor(modes.pix[(y>>predBits)*modes.w+x>>predBits]>>8&0xf, p, i, w)
		}
		p[i] = sub(p[i], pr)
	}
	p[0] = sub(p[0], 0xff000000)
}

// prefix is a canonical prefix code: each symbol's length and its code,
// bit-reversed for the LSB-first stream.
type prefix struct {
	length []uint8
	code   []uint16
}

func newPrefix(lengths []uint8) prefix {
	var count [maxCodeLen + 1]int
	for _, l := range lengths {
		count[l]++
	}
	count[0] = 0
	var next [maxCodeLen + 2]int
	code := 0
	for l := 1; l <= maxCodeLen; l++ {
		code = (code + count[l-1]) << 1
		next[l] = code
	}
	p := prefix{length: lengths, code: make([]uint16, len(lengths))}
	nonzero := 0
	for _, c := range count {
		nonzero += c
	}
	if nonzero == 1 {
		p.length = make([]uint8, len(lengths)) // a single symbol takes no bits
		return p
	}
	for s, l := range lengths {
		if l > 0 {
			p.code[s] = uint16(bits.Reverse32(uint32(next[l])) >> (32 - uint(l)))
			next[l]++
		}
	}
	return p
}

// huffLengths is a prefix code's lengths for counts, at most limit bits:
// Huffman's, with the smallest counts raised until it fits. A single used
// symbol gets length 1, which the decoder reads as a code of no bits.
func huffLengths(counts []uint32, limit int) []uint8 {
	lengths := make([]uint8, len(counts))
	used := usedSymbols(counts)
	if len(used) == 1 {
		lengths[used[0]] = 1
	}
	if len(used) < 2 {
		return lengths
	}
	for floor := uint64(1); ; floor *= 2 {
		depth := huffDepths(counts, used, floor)
		tooLong := false
		for i, s := range used {
			lengths[s] = depth[i]
			if int(depth[i]) > limit {
				tooLong = true
			}
		}
		if !tooLong {
			return lengths
		}
	}
}

// usedSymbols is the symbols of counts with a nonzero count, in order.
func usedSymbols(counts []uint32) []int {
	var used []int
	for s, c := range counts {
		if c > 0 {
			used = append(used, s)
		}
	}
	return used
}

// huffDepths is the depth of each used symbol in a Huffman tree over
// counts, each count raised to at least floor.
func huffDepths(counts []uint32, used []int, floor uint64) []uint8 {
	type node struct {
		w           uint64
		left, right int
	}
	nodes := make([]node, 0, 2*len(used))
	for _, s := range used {
		nodes = append(nodes, node{max(floor, uint64(counts[s])), -1, s})
	}
	leaves := make([]int, len(used))
	for i := range leaves {
		leaves[i] = i
	}
	slices.SortStableFunc(leaves, func(a, b int) int { return cmpU64(nodes[a].w, nodes[b].w) })
	var inner []int
	li, ii := 0, 0
	pick := func() int {
		if li < len(leaves) && (ii >= len(inner) || nodes[leaves[li]].w <= nodes[inner[ii]].w) {
			li++
			return leaves[li-1]
		}
		ii++
		return inner[ii-1]
	}
	for k := 0; k < len(used)-1; k++ {
		a, b := pick(), pick()
		nodes = append(nodes, node{nodes[a].w + nodes[b].w, a, b})
		inner = append(inner, len(nodes)-1)
	}
	depth := make([]uint8, len(nodes))
	for i := len(nodes) - 1; i >= len(used); i-- {
		for _, c := range []int{nodes[i].left, nodes[i].right} {
			depth[c] = depth[i] + 1
		}
	}
	return depth[:len(used)]
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

var codeLengthOrder = [19]uint8{17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}

// writePrefix writes the code for counts and returns it.
func writePrefix(bw *bitWriter, counts []uint32) prefix {
	used := usedSymbols(counts)
	if len(used) == 0 {
		used = []int{0}
	}
	if len(used) <= 2 && used[len(used)-1] < 256 {
		return writeSimplePrefix(bw, used, len(counts))
	}
	lengths := huffLengths(counts, maxCodeLen)
	bw.write(0, 1)
	writeCodeLengths(bw, lengthTokens(lengths))
	return newPrefix(lengths)
}

// writeSimplePrefix writes the simple code of one or two used symbols
// below 256, over an alphabet of size symbols, and returns it.
func writeSimplePrefix(bw *bitWriter, used []int, size int) prefix {
	lengths := make([]uint8, size)
	bw.write(1, 1)
	bw.write(uint64(len(used)-1), 1)
	if used[0] < 2 {
		bw.write(0, 1)
		bw.write(uint64(used[0]), 1)
	} else {
		bw.write(1, 1)
		bw.write(uint64(used[0]), 8)
	}
	if len(used) == 2 {
		bw.write(uint64(used[1]), 8)
		lengths[used[0]], lengths[used[1]] = 1, 1
	}
	return newPrefix(lengths)
}

// lengthToken is one code-length symbol (0-15 a length, 16-18 a repeat)
// with its repeat count's extra bits.
type lengthToken struct{ sym, extra uint8 }

// lengthTokens is lengths run-length coded into code-length symbols.
func lengthTokens(lengths []uint8) []lengthToken {
	var toks []lengthToken
	prev := uint8(8)
	for i := 0; i < len(lengths); {
		l := lengths[i]
		run := 1
		for i+run < len(lengths) && lengths[i+run] == l {
			run++
		}
		if l == 0 {
			toks = appendZeroRun(toks, run)
		} else {
			r := run
			if prev != l {
				toks = append(toks, lengthToken{l, 0})
				prev = l
				r--
			}
			toks = appendRepeatRun(toks, l, r)
		}
		i += run
	}
	return toks
}

// appendZeroRun appends tokens for run zero lengths: 18 and 17 for long
// and short runs, literal zeros for the rest.
func appendZeroRun(toks []lengthToken, run int) []lengthToken {
	for r := run; r > 0; {
		switch {
		case r >= 11:
			n := min(r, 138)
			toks = append(toks, lengthToken{18, uint8(n - 11)})
			r -= n
		case r >= 3:
			toks = append(toks, lengthToken{17, uint8(r - 3)})
			r = 0
		default:
			toks = append(toks, lengthToken{0, 0})
			r--
		}
	}
	return toks
}

// appendRepeatRun appends tokens for r more lengths of l after one already
// written: 16 repeats of the previous length, literals for the rest.
func appendRepeatRun(toks []lengthToken, l uint8, r int) []lengthToken {
	for r > 0 {
		if r >= 3 {
			n := min(r, 6)
			toks = append(toks, lengthToken{16, uint8(n - 3)})
			r -= n
		} else {
			toks = append(toks, lengthToken{l, 0})
			r--
		}
	}
	return toks
}

// writeCodeLengths writes the code-length code and then toks in it.
func writeCodeLengths(bw *bitWriter, toks []lengthToken) {
	var clCounts [19]uint32
	for _, t := range toks {
		clCounts[t.sym]++
	}
	clLens := huffLengths(clCounts[:], maxCLCodeLen)
	n := 4
	for i := range codeLengthOrder {
		if clLens[codeLengthOrder[i]] != 0 {
			n = max(n, i+1)
		}
	}
	bw.write(uint64(n-4), 4)
	for i := 0; i < n; i++ {
		bw.write(uint64(clLens[codeLengthOrder[i]]), 3)
	}
	bw.write(0, 1) // every symbol's length follows
	cl := newPrefix(clLens)
	for _, t := range toks {
		bw.write(uint64(cl.code[t.sym]), uint(cl.length[t.sym]))
		switch t.sym {
		case 16:
			bw.write(uint64(t.extra), 2)
		case 17:
			bw.write(uint64(t.extra), 3)
		case 18:
			bw.write(uint64(t.extra), 7)
		}
	}
}
