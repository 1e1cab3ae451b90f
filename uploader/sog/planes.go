package sog

import (
	"context"
	"math"
	"runtime"
	"unsafe"
)

// plane is one image or two (the means' bytes): their names and each
// splat's pixels, from its index and record; nil for the palette's image,
// made without a pass.
type plane struct {
	names  []string
	pixels func(i int, rec []float32, px []uint32)
}

func (e *encoder) planes() []plane {
	// The means' two images are made in one pass when two fit.
	ps := []plane{{[]string{"means_l.webp", "means_u.webp"}, func(_ int, rec []float32, px []uint32) { px[0], px[1] = e.means(rec) }}}
	if e.plan.perPass < 2 {
		ps = []plane{
			{[]string{"means_l.webp"}, func(_ int, rec []float32, px []uint32) { px[0], _ = e.means(rec) }},
			{[]string{"means_u.webp"}, func(_ int, rec []float32, px []uint32) { _, px[0] = e.means(rec) }},
		}
	}
	ps = append(ps, []plane{
		{[]string{"quats.webp"}, func(_ int, rec []float32, px []uint32) { px[0] = quatPixel(rec) }},
		{[]string{"scales.webp"}, func(_ int, rec []float32, px []uint32) {
			px[0] = 0xff000000 | uint32(e.scaleCB.nearest(rec[7]))<<16 | uint32(e.scaleCB.nearest(rec[8]))<<8 | uint32(e.scaleCB.nearest(rec[9]))
		}},
		{[]string{"sh0.webp"}, func(_ int, rec []float32, px []uint32) {
			o := 255 / (1 + math.Exp(-float64(rec[6])))
			if math.IsNaN(o) {
				o = 0
			}
			px[0] = uint32(math.Round(o))<<24 | uint32(e.dcCB.nearest(rec[3]))<<16 | uint32(e.dcCB.nearest(rec[4]))<<8 | uint32(e.dcCB.nearest(rec[5]))
		}},
	}...)
	if e.bands > 0 {
		ps = append(ps, plane{[]string{"shN_centroids.webp"}, nil}, plane{[]string{"shN_labels.webp"}, func(i int, rec []float32, px []uint32) {
			l := e.pal.labels[i]
			px[0] = 0xff000000 | (l&0xff)<<16 | (l>>8&0xff)<<8
		}})
	}
	return ps
}

func logTransform(v float64) float64 {
	if v < 0 {
		return -math.Log1p(-v)
	}
	return math.Log1p(v)
}

// means stores each axis of the log-transformed position at 16 bits, the
// low bytes in means_l's pixel and the high ones in means_u's.
func (e *encoder) means(rec []float32) (lo, hi uint32) {
	lo, hi = 0xff000000, 0xff000000
	for a := 0; a < 3; a++ {
		q := 0.0
		if l, h := e.logLo[a], e.logHi[a]; h > l {
			q = math.Round(65535 * (logTransform(float64(rec[a])) - l) / (h - l))
		}
		v := uint32(math.Max(0, math.Min(65535, q)))
		lo |= (v & 0xff) << (16 - 8*a)
		hi |= (v >> 8) << (16 - 8*a)
	}
	return lo, hi
}

// quatPixel stores a rotation as its three smallest components (scaled by
// √2 to fill a byte) and, in alpha, 252 + the index of the largest, which
// is made positive and dropped.
func quatPixel(rec []float32) uint32 {
	var q [4]float64
	l := 0.0
	for c := 0; c < 4; c++ {
		q[c] = float64(rec[10+c])
		l += q[c] * q[c]
	}
	l = math.Sqrt(l)
	if !(l > 0) || math.IsInf(l, 0) {
		q, l = [4]float64{1, 0, 0, 0}, 1
	}
	largest := 0
	for c := 1; c < 4; c++ {
		if math.Abs(q[c]) > math.Abs(q[largest]) {
			largest = c
		}
	}
	scale := math.Sqrt2 / l
	if q[largest] < 0 {
		scale = -scale
	}
	px := uint32(252+largest) << 24
	o := 0
	for c := 0; c < 4; c++ {
		if c == largest {
			continue
		}
		v := math.Round(255 * (q[c]*scale*0.5 + 0.5))
		px |= uint32(math.Max(0, math.Min(255, v))) << (16 - 8*o)
		o++
	}
	return px
}

// fillAhead is how many splats ahead fill fetches the pixels it writes.
const fillAhead = 16

// fill makes the images of ps in one pass over the source (none for the
// palette's), the records of a run shared among the cores.
func (e *encoder) fill(ctx context.Context, ps []plane) ([][]*argbImage, error) {
	imgs := make([][]*argbImage, len(ps))
	need := false
	for i, p := range ps {
		if p.pixels != nil {
			for range p.names {
				imgs[i] = append(imgs[i], newARGB(e.tw, e.th))
			}
			need = true
		}
	}
	if !need {
		return imgs, nil
	}
	var all []*argbImage
	for _, is := range imgs {
		all = append(all, is...)
	}
	rl := recordLen(e.bands)
	workers := runtime.GOMAXPROCS(0)
	err := e.src.pass(ctx, rl, func(first int, recs []float32) error {
		n := len(recs) / rl
		inParallel(n, workers, func(_, lo, hi int) {
			var px [2]uint32
			for r := lo; r < hi; r++ {
				if r+fillAhead < hi { // the pixels a later splat writes
					t := e.place[first+r+fillAhead]
					for _, img := range all {
						prefetchSpan(unsafe.Pointer(&img.pix[t]), 4)
					}
				}
				rec := recs[r*rl : (r+1)*rl]
				t := e.place[first+r]
				for i, p := range ps {
					if p.pixels != nil {
						p.pixels(first+r, rec, px[:])
						for k, img := range imgs[i] {
							img.pix[t] = px[k]
						}
					}
				}
			}
		})
		e.progress(n)
		return ctx.Err()
	})
	return imgs, err
}
