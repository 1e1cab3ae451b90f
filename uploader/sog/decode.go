package sog

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"image"
	"image/draw"
	"io"
	"math"
)

// maxMeta bounds the meta.json a reader accepts.
const maxMeta = 1 << 20

// Decode reads a bundled version 2 SOG back into splats, in the file's
// (Morton) order and the PLY's units: log scales, logit opacity. It is the
// inverse of Encode up to quantization.
func Decode(r io.ReaderAt, size int64) (*Splats, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("sog: %w", err)
	}
	var meta Meta
	if err := readJSON(zr, "meta.json", &meta); err != nil {
		return nil, err
	}
	if meta.Version != 2 || meta.Count < 1 || meta.Count > MaxSplats {
		return nil, fmt.Errorf("sog: meta.json: version %d, count %d: want version 2 and 1..%d splats", meta.Version, meta.Count, MaxSplats)
	}
	if len(meta.Means.Files) != 2 || len(meta.Scales.Files) != 1 || len(meta.Quats.Files) != 1 ||
		len(meta.SH0.Files) != 1 || len(meta.Scales.Codebook) != codebookSize || len(meta.SH0.Codebook) != codebookSize {
		return nil, fmt.Errorf("sog: meta.json: files or codebooks missing")
	}
	bands := 0
	if meta.SHN != nil {
		bands = meta.SHN.Bands
		if bands < 1 || bands > 3 || len(meta.SHN.Files) != 2 || len(meta.SHN.Codebook) != codebookSize {
			return nil, fmt.Errorf("sog: meta.json: bad shN")
		}
	}
	n := meta.Count
	s := &Splats{N: n, Bands: bands, Pos: make([]float32, 3*n), Opacity: make([]float32, n), Rest: make([]float32, n*RestCount(bands))}
	for k := 0; k < 3; k++ {
		s.Scale[k], s.DC[k] = make([]float32, n), make([]float32, n)
	}
	for k := 0; k < 4; k++ {
		s.Rot[k] = make([]float32, n)
	}
	names := []string{meta.Means.Files[0], meta.Means.Files[1], meta.Quats.Files[0], meta.Scales.Files[0], meta.SH0.Files[0]}
	img := make([]*image.NRGBA, len(names))
	for i, name := range names {
		if img[i], err = readImage(zr, name, n); err != nil {
			return nil, err
		}
	}
	decodeMeans(s, &meta.Means, img[0].Pix, img[1].Pix)
	decodeQuats(s, img[2].Pix)
	for i := 0; i < n; i++ {
		for a := 0; a < 3; a++ {
			s.Scale[a][i] = meta.Scales.Codebook[img[3].Pix[4*i+a]]
			s.DC[a][i] = meta.SH0.Codebook[img[4].Pix[4*i+a]]
		}
		o := math.Max(1e-6, math.Min(1-1e-6, float64(img[4].Pix[4*i+3])/255))
		s.Opacity[i] = float32(math.Log(o / (1 - o)))
	}
	if bands > 0 {
		return s, decodeSHN(zr, s, meta.SHN)
	}
	return s, nil
}

func decodeMeans(s *Splats, m *MeansRef, lo, hi []byte) {
	for i := 0; i < s.N; i++ {
		for a := 0; a < 3; a++ {
			q := float64(uint16(hi[4*i+a])<<8|uint16(lo[4*i+a])) / 65535
			v := float64(m.Mins[a]) + (float64(m.Maxs[a])-float64(m.Mins[a]))*q
			s.Pos[3*i+a] = float32(math.Copysign(math.Expm1(math.Abs(v)), v))
		}
	}
}

func decodeQuats(s *Splats, pix []byte) {
	for i := 0; i < s.N; i++ {
		var q [4]float64
		mode := int(pix[4*i+3]) - 252
		if mode < 0 {
			mode = 3
		}
		t, o := 0.0, 0
		for c := 0; c < 4; c++ {
			if c == mode {
				continue
			}
			q[c] = (float64(pix[4*i+o])/255 - 0.5) * 2 / math.Sqrt2
			t += q[c] * q[c]
			o++
		}
		q[mode] = math.Sqrt(math.Max(0, 1-t))
		for c := 0; c < 4; c++ {
			s.Rot[c][i] = float32(q[c])
		}
	}
}

func decodeSHN(zr *zip.Reader, s *Splats, m *SHNRef) error {
	rest, coeffs := RestCount(m.Bands), shCoeffs[m.Bands]
	labels, err := readImage(zr, m.Files[1], s.N)
	if err != nil {
		return err
	}
	pal, err := readImage(zr, m.Files[0], 0)
	if err != nil {
		return err
	}
	w := pal.Rect.Dx()
	for i := 0; i < s.N; i++ {
		l := int(labels.Pix[4*i]) | int(labels.Pix[4*i+1])<<8
		if l >= m.Count {
			return fmt.Errorf("sog: splat %d: palette entry %d of %d", i, l, m.Count)
		}
		for j := 0; j < coeffs; j++ {
			x, y := (l%64)*coeffs+j, l/64
			p := 4 * (y*w + x)
			if p+3 >= len(pal.Pix) {
				return fmt.Errorf("sog: palette image too small for %d entries", m.Count)
			}
			for ch := 0; ch < 3; ch++ {
				s.Rest[i*rest+ch*coeffs+j] = m.Codebook[pal.Pix[p+ch]]
			}
		}
	}
	return nil
}

func readJSON(zr *zip.Reader, name string, v any) error {
	f, err := zr.Open(name)
	if err != nil {
		return fmt.Errorf("sog: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMeta+1))
	if err != nil || len(b) > maxMeta {
		return fmt.Errorf("sog: %s: unreadable or over %d bytes", name, maxMeta)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("sog: %s: %w", name, err)
	}
	return nil
}

// readImage decodes a WebP of the bundle to NRGBA; its pixels must cover
// atLeast splats.
func readImage(zr *zip.Reader, name string, atLeast int) (*image.NRGBA, error) {
	f, err := zr.Open(name)
	if err != nil {
		return nil, fmt.Errorf("sog: %w", err)
	}
	defer f.Close()
	m, err := decodeWebP(f)
	if err != nil {
		return nil, fmt.Errorf("sog: %s: %w", name, err)
	}
	b := m.Bounds()
	if b.Dx()*b.Dy() < atLeast {
		return nil, fmt.Errorf("sog: %s: %dx%d pixels for %d splats", name, b.Dx(), b.Dy(), atLeast)
	}
	out, ok := m.(*image.NRGBA)
	if !ok || out.Stride != 4*b.Dx() || b.Min != (image.Point{}) {
		out = image.NewNRGBA(image.Rect(0, 0, b.Dx(), b.Dy()))
		draw.Draw(out, out.Rect, m, b.Min, draw.Src)
	}
	return out, nil
}
