package sog

import (
	"bytes"
	"image"
	"testing"
)

// TestVP8LRoundTrip decodes the encoder's WebP with golang.org/x/image/webp
// and wants every pixel back, for images whose statistics exercise each
// part of it: noise (literals), smooth gradients (the predictors), runs
// and repeats (backward references, the colour cache), single colours (one
// symbol codes) and sizes that are not multiples of a predictor block.
func TestVP8LRoundTrip(t *testing.T) {
	t.Parallel()
	r := rng(7)
	cases := map[string]func(x, y int) uint32{
		"noise":    func(x, y int) uint32 { return uint32(r.next()) },
		"gradient": func(x, y int) uint32 { return 0xff000000 | uint32(x&0xff)<<16 | uint32(y&0xff)<<8 | uint32((x+y)&0xff) },
		"constant": func(x, y int) uint32 { return 0x80402010 },
		"stripes":  func(x, y int) uint32 { return 0xff000000 | uint32(x/7%5)*0x00332211 },
		"palette":  func(x, y int) uint32 { return 0xff000000 | uint32(r.next()%6)*0x00102030 },
		"sparse": func(x, y int) uint32 {
			if r.next()%50 == 0 {
				return uint32(r.next())
			}
			return 0xff000000
		},
	}
	sizes := [][2]int{{1, 1}, {1, 37}, {37, 1}, {16, 16}, {33, 17}, {300, 211}}
	for name, f := range cases {
		for _, sz := range sizes {
			img := newARGB(sz[0], sz[1])
			for y := 0; y < sz[1]; y++ {
				for x := 0; x < sz[0]; x++ {
					img.pix[y*sz[0]+x] = f(x, y)
				}
			}
			want := append([]uint32(nil), img.pix...)
			var buf bytes.Buffer
			if err := encodeVP8L(&buf, img); err != nil {
				t.Fatalf("%s %v: %v", name, sz, err)
			}
			got, err := decodeWebP(bytes.NewReader(buf.Bytes()))
			if err != nil {
				t.Fatalf("%s %v: decode: %v", name, sz, err)
			}
			n, ok := got.(*image.NRGBA)
			if !ok {
				t.Fatalf("%s %v: decoded %T", name, sz, got)
			}
			for i, p := range want {
				q := uint32(n.Pix[4*i+3])<<24 | uint32(n.Pix[4*i])<<16 | uint32(n.Pix[4*i+1])<<8 | uint32(n.Pix[4*i+2])
				if p != q {
					t.Fatalf("%s %v: pixel %d is %08x, want %08x", name, sz, i, q, p)
				}
			}
		}
	}
}

// TestPredictionsArePredictors: choosePredictors' all-modes predictions
// are predictor's, mode by mode.
func TestPredictionsArePredictors(t *testing.T) {
	t.Parallel()
	r := rng(5)
	const w = 9
	p := make([]uint32, 4*w)
	for k := 0; k < 2000; k++ {
		for j := range p {
			p[j] = uint32(r.next())
		}
		i := w + 1 + int(r.next()%uint64(len(p)-w-1))
		if i%w == 0 {
			i++
		}
		for m, got := range predictions(p, i, w) {
			if want := predictor(uint32(m), p, i, w); got != want {
				t.Fatalf("mode %d at %d: %08x, predictor %08x", m, i, got, want)
			}
		}
	}
}
