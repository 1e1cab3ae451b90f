// Package sog encodes 3D Gaussian splats as SOG version 2 (Spatially
// Ordered Gaussians; the layout is in docs/formats.md): quantized attributes
// in lossless WebP images plus a meta.json, bundled as one zip. It reads a
// PLY in passes, holding a few bytes a splat rather than the scene (the
// memory rule is in docs/formats.md). It knows files and splats, nothing of
// jobs or uploads.
package sog

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// Options bound and follow an encoding.
type Options struct {
	// Memory is about the most the encoding may hold, in bytes (0:
	// DefaultMemory). Less than MinMemory is taken as MinMemory.
	Memory int64
	// Progress, when set, is called from time to time with the PLY bytes
	// read so far, over every pass, and their total.
	Progress func(done, total int64)
}

// Encode writes s as a bundled SOG to w. The output depends on s alone.
// Canceling ctx stops the encoding and returns ctx's error.
func Encode(ctx context.Context, w io.Writer, s *Splats) error {
	return encodeSource(ctx, w, &memSource{s: s}, Options{})
}

// FormatError is a source the encoder cannot take: not a 3DGS PLY it
// reads, or splats it cannot encode. Other errors are I/O or cancellation.
type FormatError struct{ Err error }

func (e *FormatError) Error() string { return e.Err.Error() }
func (e *FormatError) Unwrap() error { return e.Err }

// Result describes one transcoding.
type Result struct {
	Splats int
	Bands  int
}

// Transcode reads a 3DGS PLY of size bytes from r and writes it to w as a
// bundled SOG.
func Transcode(ctx context.Context, r io.ReaderAt, size int64, w io.Writer, o Options) (Result, error) {
	src, err := openPLY(r, size)
	if err != nil {
		return Result{}, &FormatError{err}
	}
	if err := encodeSource(ctx, w, src, o); err != nil {
		return Result{}, err
	}
	return Result{Splats: src.count(), Bands: src.bands()}, nil
}

// TranscodeFile encodes the PLY at src as a SOG at dst, through a
// temporary file beside dst that is renamed into place once complete (dst
// never holds a partial SOG).
func TranscodeFile(ctx context.Context, src, dst string, o Options) (Result, error) {
	in, err := os.Open(src)
	if err != nil {
		return Result{}, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return Result{}, err
	}
	return TranscodeTo(ctx, in, fi.Size(), dst, o)
}

// TranscodeTo is TranscodeFile for a PLY of size bytes read from in (the
// daemon encodes from the descriptor it hashed, never a path looked up
// again).
func TranscodeTo(ctx context.Context, in io.ReaderAt, size int64, dst string, o Options) (Result, error) {
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.tmp")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(out.Name()) // a no-op once renamed
	bw := bufio.NewWriterSize(out, 1<<20)
	res, err := Transcode(ctx, in, size, bw, o)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = out.Chmod(0o644) // CreateTemp's 0600 is for the work in progress
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(out.Name(), dst)
	}
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// source is splats the encoder reads in passes.
type source interface {
	count() int
	bands() int
	// pass calls fn with consecutive runs of records, the first one's
	// index and their values (recordLen floats each, in newSplats' column
	// order); only the first cols values of a record need be set.
	pass(ctx context.Context, cols int, fn func(first int, recs []float32) error) error
	// size is the bytes one pass reads (0: none, in memory).
	size() int64
}

// recordLen is the floats of one record at bands.
func recordLen(bands int) int { return 14 + RestCount(bands) }

// encoder is one encoding's state between its passes.
type encoder struct {
	src      source
	n, bands int
	rest     int
	plan     plan
	tw, th   int
	o        Options
	passes   int // the passes a source is read in
	pass     int // passes done
	read     int // records read in this pass

	step    int // every step-th splat is sampled
	sampleN int
	scaleS  []float32 // the sample's values, for the codebooks
	dcS     []float32
	restS   []float32 // the sample's f_rest rows
	pos     []float32 // the positions, when the plan keeps them
	logLo   [3]float64
	logHi   [3]float64
	lo, hi  [3]float64 // the positions' bounds
	scaleCB *lookup
	dcCB    *lookup
	pal     *palette
	place   []uint32 // place[i] is splat i's pixel
}

// encodeSource writes src as a bundled SOG to w with o's memory and
// progress.
func encodeSource(ctx context.Context, w io.Writer, src source, o Options) error {
	n := src.count()
	if n < 1 || n > MaxSplats {
		return &FormatError{fmt.Errorf("sog: %d splats: a SOG holds 1 to %d", n, MaxSplats)}
	}
	e := &encoder{src: src, n: n, bands: src.bands(), rest: RestCount(src.bands()), o: o}
	e.plan = makePlan(int64(n), e.bands, o.Memory)
	e.tw, e.th = textureSize(n)
	refine, fused := e.countPasses()
	if err := e.firstPass(ctx); err != nil {
		return err
	}
	meta := &Meta{Version: 2, Asset: &Asset{Generator: Generator}, Count: n}
	if err := e.fitAndOrder(ctx, meta, fused); err != nil {
		return err
	}
	if refine && !fused {
		if err := e.refinePalette(ctx); err != nil {
			return err
		}
	}
	palImg := e.describe(meta)
	return e.writeBundle(ctx, w, meta, palImg)
}

// countPasses sets e.passes and reports whether the palette is refined in
// a pass of its own or fused into the sort's.
func (e *encoder) countPasses() (refine, fused bool) {
	e.passes = 1 + len(e.passPlanes())
	refine = e.bands > 0 && e.n > maxSample
	if refine {
		e.passes++ // the palette's refinement
	}
	if !e.plan.keepPos {
		e.passes++
	}
	// Without the positions, the sort's pass also refines the palette.
	fused = refine && !e.plan.keepPos && e.plan.fuse
	if fused {
		e.passes--
	}
	return refine, fused
}

// fitAndOrder fits the palette (alongside, when the plan allows) and the
// 1D codebooks into meta, then orders the splats.
func (e *encoder) fitAndOrder(ctx context.Context, meta *Meta, fused bool) error {
	var palDone sync.WaitGroup
	if e.bands > 0 {
		palDone.Add(1)
		go func() {
			defer palDone.Done()
			e.pal = fitPalette(ctx, e.restS, e.sampleN, e.rest, paletteSize(e.n))
			e.restS = nil
		}()
		if !e.plan.parallel || fused {
			palDone.Wait()
		}
	}
	meta.Scales.Codebook, e.scaleCB = codebook1D(e.scaleS)
	meta.SH0.Codebook, e.dcCB = codebook1D(e.dcS)
	e.scaleS, e.dcS = nil, nil
	err := e.order(ctx, fused)
	palDone.Wait()
	if err != nil {
		return err
	}
	return ctx.Err()
}

// describe fills in meta's bounds, files and SH palette and returns the
// palette's centroids image (nil without SH bands).
func (e *encoder) describe(meta *Meta) *argbImage {
	for a := 0; a < 3; a++ {
		meta.Means.Mins[a], meta.Means.Maxs[a] = float32(e.logLo[a]), float32(e.logHi[a])
	}
	meta.Means.Files = []string{"means_l.webp", "means_u.webp"}
	meta.Scales.Files = []string{"scales.webp"}
	meta.Quats.Files = []string{"quats.webp"}
	meta.SH0.Files = []string{"sh0.webp"}
	if e.bands == 0 {
		return nil
	}
	cb, palImg := e.paletteImage()
	meta.SHN = &SHNRef{Count: len(e.pal.entries) / e.rest, Bands: e.bands, Codebook: cb, Files: []string{"shN_centroids.webp", "shN_labels.webp"}}
	return palImg
}

// writeBundle writes meta and then the images, a pass of planes at a time,
// to w.
func (e *encoder) writeBundle(ctx context.Context, w io.Writer, meta *Meta, palImg *argbImage) error {
	bw, err := newBundle(w, meta)
	if err != nil {
		return err
	}
	// The images in the bundle's (name) order; the centroids' image is
	// made from the palette alone.
	for _, ps := range e.passPlanes() {
		imgs, err := e.fill(ctx, ps)
		if err != nil {
			return err
		}
		if err := e.compress(bw, ps, imgs, palImg); err != nil {
			return err
		}
	}
	return bw.close()
}

// passPlanes groups the planes into passes of at most plan.perPass images
// (a plane's images are made in one pass).
func (e *encoder) passPlanes() [][]plane {
	var out [][]plane
	var cur []plane
	images := 0
	for _, p := range e.planes() {
		k := len(p.names)
		if p.pixels == nil {
			k = 0
		}
		if images > 0 && images+k > e.plan.perPass {
			out, cur, images = append(out, cur), nil, 0
		}
		cur, images = append(cur, p), images+k
	}
	return append(out, cur)
}

// progress adds the bytes of records read to the encoding's count.
func (e *encoder) progress(records int) {
	size := e.src.size()
	if e.o.Progress == nil || size == 0 {
		return
	}
	e.read += records
	e.o.Progress(int64(e.pass)*size+int64(float64(size)*float64(e.read)/float64(e.n)), int64(e.passes)*size)
	if e.read == e.n {
		e.pass, e.read = e.pass+1, 0
	}
}

// firstPass finds the positions' bounds, checks they are finite, and
// takes the sample the codebooks and the palette are fitted on.
func (e *encoder) firstPass(ctx context.Context) error {
	e.step = (e.n + maxSample - 1) / maxSample
	e.sampleN = (e.n + e.step - 1) / e.step
	e.scaleS = make([]float32, 0, 3*e.sampleN)
	e.dcS = make([]float32, 0, 3*e.sampleN)
	e.restS = make([]float32, 0, e.rest*e.sampleN)
	if e.plan.keepPos {
		e.pos = make([]float32, 0, 3*e.n)
	}
	for a := 0; a < 3; a++ {
		e.lo[a], e.hi[a] = math.Inf(1), math.Inf(-1)
	}
	rl := recordLen(e.bands)
	return e.src.pass(ctx, rl, func(first int, recs []float32) error {
		for r := 0; r*rl < len(recs); r++ {
			rec := recs[r*rl : (r+1)*rl]
			for a := 0; a < 3; a++ {
				v := float64(rec[a])
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return &FormatError{fmt.Errorf("sog: splat %d has a non-finite position", first+r)}
				}
				e.lo[a], e.hi[a] = math.Min(e.lo[a], v), math.Max(e.hi[a], v)
			}
			if e.pos != nil {
				e.pos = append(e.pos, rec[0], rec[1], rec[2])
			}
			if (first+r)%e.step == 0 {
				e.scaleS = append(e.scaleS, rec[7], rec[8], rec[9])
				e.dcS = append(e.dcS, rec[3], rec[4], rec[5])
				e.restS = append(e.restS, rec[14:]...)
			}
		}
		e.progress(len(recs) / rl)
		return nil
	})
}

// compress encodes the images of a pass, on every core, and adds them to
// the bundle in order.
func (e *encoder) compress(b *bundle, ps []plane, imgs [][]*argbImage, palImg *argbImage) error {
	type job struct {
		name string
		img  *argbImage
		out  []byte
		err  error
	}
	var jobs []*job
	for i, p := range ps {
		if p.pixels == nil {
			jobs = append(jobs, &job{name: p.names[0], img: palImg})
			continue
		}
		for k, name := range p.names {
			jobs = append(jobs, &job{name: name, img: imgs[i][k]})
		}
	}
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var buf sliceWriter
			j.err = encodeVP8L(&buf, j.img)
			j.out, j.img = buf.b, nil
		}()
	}
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			return fmt.Errorf("sog: %s: %w", j.name, j.err)
		}
		if err := b.add(j.name, j.out); err != nil {
			return err
		}
		j.out = nil
	}
	return nil
}

type sliceWriter struct{ b []byte }

func (s *sliceWriter) Write(p []byte) (int, error) { s.b = append(s.b, p...); return len(p), nil }

// paletteImage codes the SH palette's coefficients through one codebook,
// and returns it and the palette's image (64 entries a row, one pixel per
// coefficient, the channels in R, G, B).
func (e *encoder) paletteImage() ([]float32, *argbImage) {
	rest, coeffs := e.rest, shCoeffs[e.bands]
	cent := e.pal.entries
	count := len(cent) / rest
	cb, codes := quantize1D(cent) // row-major: entry i, value j at i*rest+j
	rows := (count + 63) / 64
	img := newARGB(64*coeffs, rows)
	for i := 0; i < count; i++ {
		for j := 0; j < coeffs; j++ {
			img.pix[i*coeffs+j] = 0xff000000 | uint32(codes[i*rest+j])<<16 | uint32(codes[i*rest+coeffs+j])<<8 | uint32(codes[i*rest+2*coeffs+j])
		}
	}
	return cb, img
}

// inParallel splits rows [0, n) into workers runs and calls fn on each, w
// naming the run, all at once; it returns when every call has.
func inParallel(n, workers int, fn func(w, lo, hi int)) {
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for w := 0; w < workers; w++ {
		lo, hi := min(n, w*chunk), min(n, (w+1)*chunk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(w, lo, hi)
		}()
	}
	wg.Wait()
}
