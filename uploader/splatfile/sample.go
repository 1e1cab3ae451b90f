package splatfile

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"
)

// The sample writers produce small, deterministic splat files for the demo
// and for tests: the same n always gives the same bytes, so fixtures can be
// regenerated and compared. The splats form a fuzzy sphere; their values are
// plausible, not meaningful.

// rng is a tiny xorshift generator: deterministic across Go versions, unlike
// math/rand's unexported algorithms.
type rng uint64

func (r *rng) next() uint64 {
	x := uint64(*r)
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	*r = rng(x)
	return x
}

// float returns a value in [-1, 1).
func (r *rng) float() float32 { return float32(r.next()>>40)/float32(1<<23) - 1 }

// shRest is how many f_rest_* coefficients WritePLY writes (SH degree 3).
const shRest = 45

// WritePLY writes a plain binary_little_endian 3DGS PLY with n splats: x y z,
// nx ny nz, f_dc_0..2, f_rest_0..44, opacity, scale_0..2, rot_0..3, as the
// reference trainer exports them.
func WritePLY(w io.Writer, n int) error {
	if n <= 0 {
		return fmt.Errorf("splatfile: WritePLY needs n > 0, got %d", n)
	}
	props := []string{"x", "y", "z", "nx", "ny", "nz", "f_dc_0", "f_dc_1", "f_dc_2"}
	for i := 0; i < shRest; i++ {
		props = append(props, fmt.Sprintf("f_rest_%d", i))
	}
	props = append(props, "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")

	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "ply\nformat binary_little_endian 1.0\ncomment splatd sample\nelement vertex %d\n", n)
	for _, p := range props {
		fmt.Fprintf(bw, "property float %s\n", p)
	}
	bw.WriteString("end_header\n")

	r := rng(0x9e3779b97f4a7c15)
	rec := make([]float32, len(props))
	for i := 0; i < n; i++ {
		x, y, z := r.float(), r.float(), r.float()
		l := float32(math.Sqrt(float64(x*x+y*y+z*z))) + 1e-6
		rec[0], rec[1], rec[2] = x/l, y/l, z/l // on the unit sphere
		for j := 3; j < len(rec); j++ {
			rec[j] = r.float() * 0.1
		}
		o := len(props) - 8
		rec[o] = 2                                          // opacity (logit): mostly opaque
		rec[o+1], rec[o+2], rec[o+3] = -4, -4, -4           // log scale
		rec[o+4], rec[o+5], rec[o+6], rec[o+7] = 1, 0, 0, 0 // identity rotation
		if err := binary.Write(bw, binary.LittleEndian, rec); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteCompressedPLY writes a PlayCanvas compressed PLY with n splats: one
// chunk record (18 floats) per 256 splats, then the four packed uints of
// each splat. It has no sh element.
func WriteCompressedPLY(w io.Writer, n int) error {
	if n <= 0 {
		return fmt.Errorf("splatfile: WriteCompressedPLY needs n > 0, got %d", n)
	}
	chunks := (n + 255) / 256
	chunkProps := []string{
		"min_x", "min_y", "min_z", "max_x", "max_y", "max_z",
		"min_scale_x", "min_scale_y", "min_scale_z", "max_scale_x", "max_scale_y", "max_scale_z",
		"min_r", "min_g", "min_b", "max_r", "max_g", "max_b",
	}
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "ply\nformat binary_little_endian 1.0\ncomment splatd sample\nelement chunk %d\n", chunks)
	for _, p := range chunkProps {
		fmt.Fprintf(bw, "property float %s\n", p)
	}
	fmt.Fprintf(bw, "element vertex %d\n", n)
	for _, p := range packedVertexProps {
		fmt.Fprintf(bw, "property uint %s\n", p)
	}
	bw.WriteString("end_header\n")

	chunk := []float32{-1, -1, -1, 1, 1, 1, -5, -5, -5, -3, -3, -3, 0, 0, 0, 1, 1, 1}
	for i := 0; i < chunks; i++ {
		if err := binary.Write(bw, binary.LittleEndian, chunk); err != nil {
			return err
		}
	}
	r := rng(0x2545f4914f6cdd1d)
	rec := make([]uint32, 4)
	for i := 0; i < n; i++ {
		for j := range rec {
			rec[j] = uint32(r.next())
		}
		if err := binary.Write(bw, binary.LittleEndian, rec); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// sampleTime is the fixed modification time of every entry WriteSOG writes,
// so that its output is byte-for-byte reproducible.
var sampleTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// WriteSOG writes a bundled SOG (version 2) for n splats: a ZIP with
// meta.json at its root and the WebP entries it names. The images are small
// placeholders (a RIFF/WEBP header and filler), enough for Check and for the
// simulator, not for a viewer. Entries are stored, not deflated, to keep the
// bytes independent of the Go version's compressor.
func WriteSOG(w io.Writer, n int) error {
	if n <= 0 {
		return fmt.Errorf("splatfile: WriteSOG needs n > 0, got %d", n)
	}
	codebook := make([]float64, 256)
	for i := range codebook {
		codebook[i] = float64(i)/128 - 1
	}
	files := func(names ...string) []string { return names }
	meta := map[string]any{
		"version":   2,
		"count":     n,
		"antialias": false,
		"means":     map[string]any{"mins": []float64{-1, -1, -1}, "maxs": []float64{1, 1, 1}, "files": files("means_l.webp", "means_u.webp")},
		"scales":    map[string]any{"codebook": codebook, "files": files("scales.webp")},
		"quats":     map[string]any{"files": files("quats.webp")},
		"sh0":       map[string]any{"codebook": codebook, "files": files("sh0.webp")},
	}
	metaJSON, err := json.Marshal(meta) // map keys are sorted: deterministic
	if err != nil {
		return err
	}
	zw := zip.NewWriter(w)
	add := func(name string, data []byte) error {
		fw, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store, Modified: sampleTime})
		if err != nil {
			return err
		}
		_, err = fw.Write(data)
		return err
	}
	if err := add("meta.json", metaJSON); err != nil {
		return err
	}
	side := int(math.Ceil(math.Sqrt(float64(n))))
	for i, name := range []string{"means_l.webp", "means_u.webp", "scales.webp", "quats.webp", "sh0.webp"} {
		if err := add(name, placeholderWebP(side, byte(i))); err != nil {
			return err
		}
	}
	return zw.Close()
}

// SampleSOGFolder returns the files of an unbundled SOG of n splats: the
// entries of WriteSOG's bundle by name.
func SampleSOGFolder(n int) (map[string][]byte, error) {
	var b bytes.Buffer
	if err := WriteSOG(&b, n); err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		files[f.Name], err = io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// WriteSOGFolder writes an unbundled SOG of n splats (SampleSOGFolder) into
// dir, made if missing: the images first and meta.json last, as a careful
// copy would.
func WriteSOGFolder(dir string, n int) error {
	files, err := SampleSOGFolder(n)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if name != SOGMeta {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, SOGMeta), files[SOGMeta], 0o644)
}

// WriteSparseSOGFolder writes an unbundled SOG of n splats into dir, as
// WriteSOGFolder, with each image then made a sparse file of imageSize
// bytes: a RIFF header declaring that size and a hole. It passes the check
// and costs nothing on disk, as a hostile folder's images can: the tests of
// what bounds a folder's bundle use it.
func WriteSparseSOGFolder(dir string, n int, imageSize int64) error {
	if imageSize < 12 || imageSize-8 > math.MaxUint32 {
		return fmt.Errorf("splatfile: a WebP image is 12 bytes to 4 GiB, not %d", imageSize)
	}
	if err := WriteSOGFolder(dir, n); err != nil {
		return err
	}
	files, err := SampleSOGFolder(n)
	if err != nil {
		return err
	}
	head := binary.LittleEndian.AppendUint32([]byte("RIFF"), uint32(imageSize-8))
	head = append(head, "WEBP"...)
	for name := range files {
		if name == SOGMeta {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, head, 0o644); err != nil {
			return err
		}
		if err := os.Truncate(p, imageSize); err != nil {
			return err
		}
	}
	return nil
}

// placeholderWebP returns a RIFF WEBP container whose payload is filler
// sized to the image side; it is not decodable.
func placeholderWebP(side int, fill byte) []byte {
	payload := make([]byte, 8+side%64)
	binary.LittleEndian.PutUint32(payload, uint32(side))
	for i := 4; i < len(payload); i++ {
		payload[i] = fill
	}
	b := []byte("RIFF\x00\x00\x00\x00WEBPVP8L")
	b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}
