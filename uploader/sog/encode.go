// Package sog encodes 3D Gaussian splats as SOG version 2 (Spatially
// Ordered Gaussians; the layout is in docs/formats.md): quantized attributes in lossless WebP
// images plus a meta.json, bundled as one zip. It knows files and splats,
// nothing of jobs or uploads.
package sog

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/splatd/splatd/state"
)

// Generator is what meta.json's asset.generator says of this encoder.
const Generator = "splatd sog encoder"

// Meta is meta.json of a version 2 SOG.
type Meta struct {
	Version   int      `json:"version"`
	Asset     *Asset   `json:"asset,omitempty"`
	Count     int      `json:"count"`
	Antialias bool     `json:"antialias"`
	Means     MeansRef `json:"means"`
	Scales    Codebook `json:"scales"`
	Quats     Files    `json:"quats"`
	SH0       Codebook `json:"sh0"`
	SHN       *SHNRef  `json:"shN,omitempty"`
}

// Asset names the writer.
type Asset struct {
	Generator string `json:"generator"`
}

// MeansRef holds the log-domain position ranges.
type MeansRef struct {
	Mins  [3]float32 `json:"mins"`
	Maxs  [3]float32 `json:"maxs"`
	Files []string   `json:"files"`
}

// Codebook is a 256-entry codebook and its image.
type Codebook struct {
	Codebook []float32 `json:"codebook"`
	Files    []string  `json:"files"`
}

// Files is an attribute stored in images alone.
type Files struct {
	Files []string `json:"files"`
}

// SHNRef is the SH palette of bands 1..3.
type SHNRef struct {
	Count    int       `json:"count"`
	Bands    int       `json:"bands"`
	Codebook []float32 `json:"codebook"`
	Files    []string  `json:"files"`
}

// shCoeffs is the number of SH coefficients per colour channel at bands.
var shCoeffs = [...]int{0, 3, 8, 15}

// textureSize is the images' size for n splats: both sides multiples of 4.
func textureSize(n int) (w, h int) {
	w = int(math.Ceil(math.Sqrt(float64(n))/4)) * 4
	h = int(math.Ceil(float64(n)/float64(w)/4)) * 4
	return w, h
}

// Encode writes s as a bundled SOG to w. The output depends on s alone.
// Canceling ctx stops the palette search and returns ctx's error.
func Encode(ctx context.Context, w io.Writer, s *Splats) error {
	if s.N < 1 || s.N > MaxSplats {
		return &FormatError{fmt.Errorf("sog: %d splats: a SOG holds 1 to %d", s.N, MaxSplats)}
	}
	for i, v := range s.Pos {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return &FormatError{fmt.Errorf("sog: splat %d has a non-finite position", i/3)}
		}
	}
	// The SH palette is the long pole: it starts first and the images of
	// the other attributes are made and encoded while it runs.
	var shDone sync.WaitGroup
	var pal []float32
	var palLabels []uint32
	if s.Bands > 0 {
		shDone.Add(1)
		go func() {
			defer shDone.Done()
			pal, palLabels = kmeansPalette(ctx, s.Rest, s.N, RestCount(s.Bands), paletteSize(s.N))
		}()
	}
	order := mortonOrder(s.Pos, s.N)
	tw, th := textureSize(s.N)
	imgs := newImageSet(tw * th)
	meta := &Meta{Version: 2, Asset: &Asset{Generator: Generator}, Count: s.N}
	meta.Means = encodeMeans(s, order, tw, th, imgs)
	imgs.add("quats.webp", encodeQuats(s, order, tw, th))
	meta.Quats = Files{Files: []string{"quats.webp"}}
	meta.Scales = encodeScales(s, order, tw, th, imgs)
	meta.SH0 = encodeSH0(s, order, tw, th, imgs)
	shDone.Wait()
	if s.Bands > 0 {
		meta.SHN = encodeSHN(s, pal, palLabels, order, tw, th, imgs)
	}
	files, err := imgs.wait()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return err
	}
	return writeBundle(w, meta, files)
}

// imageSet encodes images as they are added, on at most GOMAXPROCS
// goroutines (each using a libwebp instance of webp, at most one each),
// and keeps them in the order added.
type imageSet struct {
	mu    sync.Mutex
	names []string
	data  map[string][]byte
	err   error
	wg    sync.WaitGroup
	sem   chan struct{}
	webp  webpPool
}

// newImageSet is the set for images of at most pixels pixels.
func newImageSet(pixels int) *imageSet {
	s := &imageSet{data: map[string][]byte{}, sem: make(chan struct{}, runtime.GOMAXPROCS(0))}
	s.webp.reserve = webpBytesPerPixel * pixels
	return s
}

func (s *imageSet) add(name string, img *image.NRGBA) {
	s.mu.Lock()
	s.names = append(s.names, name)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.sem <- struct{}{}
		defer func() { <-s.sem }()
		var buf bytes.Buffer
		err := encodeWebP(&s.webp, &buf, img)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil && s.err == nil {
			s.err = fmt.Errorf("sog: %s: %w", name, err)
		}
		s.data[name] = buf.Bytes()
	}()
}

type namedFile struct {
	name string
	data []byte
}

func (s *imageSet) wait() ([]namedFile, error) {
	s.wg.Wait()
	s.webp.close()
	if s.err != nil {
		return nil, s.err
	}
	// Images finish in any order; the bundle lists them by name.
	slices.Sort(s.names)
	var out []namedFile
	for _, n := range s.names {
		out = append(out, namedFile{n, s.data[n]})
	}
	return out, nil
}

// writeBundle zips the images and meta.json, stored (WebP is compressed
// already), with no timestamps, so equal input gives equal bytes.
func writeBundle(w io.Writer, meta *Meta, files []namedFile) error {
	mj, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("sog: meta.json: %w", err)
	}
	zw := zip.NewWriter(w)
	for _, f := range append([]namedFile{{"meta.json", mj}}, files...) {
		fw, err := zw.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Store})
		if err != nil {
			return err
		}
		if _, err := fw.Write(f.data); err != nil {
			return err
		}
	}
	return zw.Close()
}

func newTexture(w, h int) *image.NRGBA { return image.NewNRGBA(image.Rect(0, 0, w, h)) }

func logTransform(v float64) float64 {
	if v < 0 {
		return -math.Log1p(-v)
	}
	return math.Log1p(v)
}

// encodeMeans stores each axis of the log-transformed position at 16 bits
// across means_l (low byte) and means_u (high byte). The logarithms are
// taken once, in file order, and read back in Morton order.
func encodeMeans(s *Splats, order []uint32, tw, th int, imgs *imageSet) MeansRef {
	lo := [3]float64{math.Inf(1), math.Inf(1), math.Inf(1)}
	hi := [3]float64{math.Inf(-1), math.Inf(-1), math.Inf(-1)}
	logs := make([]float64, 3*s.N)
	for i := 0; i < s.N; i++ {
		for a := 0; a < 3; a++ {
			v := logTransform(float64(s.Pos[3*i+a]))
			logs[3*i+a] = v
			lo[a], hi[a] = math.Min(lo[a], v), math.Max(hi[a], v)
		}
	}
	ml, mu := newTexture(tw, th), newTexture(tw, th)
	for t, g := range order {
		for a := 0; a < 3; a++ {
			q := 0.0
			if hi[a] > lo[a] {
				q = math.Round(65535 * (logs[3*int(g)+a] - lo[a]) / (hi[a] - lo[a]))
			}
			v := uint16(math.Max(0, math.Min(65535, q)))
			ml.Pix[4*t+a], mu.Pix[4*t+a] = uint8(v), uint8(v>>8)
		}
		ml.Pix[4*t+3], mu.Pix[4*t+3] = 255, 255
	}
	imgs.add("means_l.webp", ml)
	imgs.add("means_u.webp", mu)
	ref := MeansRef{Files: []string{"means_l.webp", "means_u.webp"}}
	for a := 0; a < 3; a++ {
		ref.Mins[a], ref.Maxs[a] = float32(lo[a]), float32(hi[a])
	}
	return ref
}

// inOrder returns the columns' values in order, interleaved:
// out[len(cols)*t+c] = cols[c][order[t]]. It is one tight loop of
// independent loads, so the processor keeps many cache misses in flight;
// an encoder's own loop, with a square root or a logarithm a value, waited
// on each one.
func inOrder(order []uint32, cols ...[]float32) []float32 {
	m := len(cols)
	out := make([]float32, m*len(order))
	for c, col := range cols {
		for t, g := range order {
			out[m*t+c] = col[g]
		}
	}
	return out
}

// encodeQuats stores each rotation as its three smallest components
// (scaled by √2 to fill a byte) and, in alpha, 252 + the index of the
// largest, which is made positive and dropped.
func encodeQuats(s *Splats, order []uint32, tw, th int) *image.NRGBA {
	img := newTexture(tw, th)
	rot := inOrder(order, s.Rot[:]...)
	for t := range order {
		var q [4]float64
		l := 0.0
		for c := 0; c < 4; c++ {
			q[c] = float64(rot[4*t+c])
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
		o := 0
		for c := 0; c < 4; c++ {
			if c == largest {
				continue
			}
			v := math.Round(255 * (q[c]*scale*0.5 + 0.5))
			img.Pix[4*t+o] = uint8(math.Max(0, math.Min(255, v)))
			o++
		}
		img.Pix[4*t+3] = uint8(252 + largest)
	}
	return img
}

// encodeScales codes the three log scales through one shared codebook.
func encodeScales(s *Splats, order []uint32, tw, th int, imgs *imageSet) Codebook {
	cb, labels := quantize1D(concat(s.Scale[:]...))
	img := newTexture(tw, th)
	for t, g := range order {
		for a := 0; a < 3; a++ {
			img.Pix[4*t+a] = labels[a*s.N+int(g)]
		}
		img.Pix[4*t+3] = 255
	}
	imgs.add("scales.webp", img)
	return Codebook{Codebook: cb, Files: []string{"scales.webp"}}
}

// encodeSH0 codes the DC colour through one codebook and stores the
// opacity, through the sigmoid, in alpha.
func encodeSH0(s *Splats, order []uint32, tw, th int, imgs *imageSet) Codebook {
	cb, labels := quantize1D(concat(s.DC[:]...))
	img := newTexture(tw, th)
	for t, g := range order {
		for a := 0; a < 3; a++ {
			img.Pix[4*t+a] = labels[a*s.N+int(g)]
		}
		o := 255 / (1 + math.Exp(-float64(s.Opacity[g])))
		if math.IsNaN(o) {
			o = 0
		}
		img.Pix[4*t+3] = uint8(math.Round(o))
	}
	imgs.add("sh0.webp", img)
	return Codebook{Codebook: cb, Files: []string{"sh0.webp"}}
}

func concat(cols ...[]float32) []float32 {
	n := 0
	for _, c := range cols {
		n += len(c)
	}
	out := make([]float32, 0, n)
	for _, c := range cols {
		out = append(out, c...)
	}
	return out
}

// encodeSHN codes the SH palette's coefficients through one codebook,
// and stores the palette (64 entries a row, one pixel per coefficient, the
// channels in R, G, B) and each splat's 16-bit entry.
func encodeSHN(s *Splats, cent []float32, labels []uint32, order []uint32, tw, th int, imgs *imageSet) *SHNRef {
	rest, coeffs := RestCount(s.Bands), shCoeffs[s.Bands]
	count := len(cent) / rest
	cb, codes := quantize1D(cent) // row-major: entry i, value j at i*rest+j
	rows := (count + 63) / 64
	pal := newTexture(64*coeffs, rows)
	for i := 0; i < count; i++ {
		for j := 0; j < coeffs; j++ {
			p := 4 * (i*coeffs + j)
			for ch := 0; ch < 3; ch++ {
				pal.Pix[p+ch] = codes[i*rest+ch*coeffs+j]
			}
			pal.Pix[p+3] = 255
		}
	}
	lab := newTexture(tw, th)
	for t, g := range order {
		l := labels[g]
		lab.Pix[4*t], lab.Pix[4*t+1], lab.Pix[4*t+3] = uint8(l), uint8(l>>8), 255
	}
	imgs.add("shN_centroids.webp", pal)
	imgs.add("shN_labels.webp", lab)
	return &SHNRef{Count: count, Bands: s.Bands, Codebook: cb, Files: []string{"shN_centroids.webp", "shN_labels.webp"}}
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

// Transcode reads a 3DGS PLY from r and writes it to w as a bundled SOG.
func Transcode(ctx context.Context, r io.Reader, w io.Writer) (Result, error) {
	return transcode(ctx, r, 0, w, nil)
}

// transcode is Transcode of a source of size bytes (0: unknown); read,
// when set, is called once the PLY is read, before the encoding.
func transcode(ctx context.Context, r io.Reader, size int64, w io.Writer, read func()) (Result, error) {
	go Warm()
	s, err := readPLY(state.ContextReader(ctx, r), size)
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, &FormatError{err}
	}
	if read != nil {
		read()
	}
	if err := Encode(ctx, w, s); err != nil {
		return Result{}, err
	}
	return Result{Splats: s.N, Bands: s.Bands}, nil
}

// TranscodeFile encodes the PLY at src as a SOG at dst, through a
// temporary file beside dst that is renamed into place once complete (dst
// never holds a partial SOG).
func TranscodeFile(ctx context.Context, src, dst string) (Result, error) {
	in, err := os.Open(src)
	if err != nil {
		return Result{}, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return Result{}, err
	}
	return TranscodeTo(ctx, in, fi.Size(), dst, nil)
}

// TranscodeTo is TranscodeFile for a PLY of size bytes read from in (the
// daemon encodes from the descriptor it hashed, never a path looked up
// again). read, when set, is called once the PLY is read (in is not read
// after it), before the compression, which takes most of the time.
func TranscodeTo(ctx context.Context, in io.Reader, size int64, dst string, read func()) (Result, error) {
	out, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*.tmp")
	if err != nil {
		return Result{}, err
	}
	defer os.Remove(out.Name()) // a no-op once renamed
	bw := bufio.NewWriterSize(out, 1<<20)
	res, err := transcode(ctx, in, size, bw, read)
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

// PeakMemory is about the most memory, in bytes, that encoding a PLY of
// size bytes holding n splats takes, the garbage collector held near live
// memory as uploader holds it. Measured (2026-11-26, peak RSS of splatd
// encode) with three SH bands: 250,000 / 1 M / 2 M splats (59 / 237 /
// 473 MiB PLYs) took 215 / 558 / 1,028 MiB; without SH, 1 M splats
// (65 MiB) took 243 MiB. The scene is held whole (about 1.9× the PLY
// with its work arrays), the images and sort keys add about 40 bytes a
// splat, and the WebAssembly libwebp about 96 MiB: each measured peak is
// at most this.
func PeakMemory(size, n int64) int64 { return size*19/10 + 40*n + 96<<20 }
