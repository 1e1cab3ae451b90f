package sog

import (
	"encoding/binary"
	"errors"
	"io"
	"math/bits"
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
