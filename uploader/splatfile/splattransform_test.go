package splatfile

import (
	"archive/zip"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// The splat-transform lane (make test-formats, deploy/test/formats.sh): the
// official converter, PlayCanvas splat-transform, writes every format it
// has that splatd takes from generated scenes, and Check must accept each
// file and reject truncated and corrupted copies. SPLATD_SPLAT_TRANSFORM is
// the converter's path; without it these tests skip.

func splatTransform(t *testing.T) string {
	t.Helper()
	st := os.Getenv("SPLATD_SPLAT_TRANSFORM")
	if st == "" {
		t.Skip("SPLATD_SPLAT_TRANSFORM is not set (make test-formats sets it)")
	}
	return st
}

// WriteScenePLY writes a 3DGS PLY of n splats with SH bands 0 or 3 from a
// fixed seed: positions in a Gaussian blob, colours, opacities, log scales,
// normalised rotations and (for 3 bands) small SH coefficients.
func writeScenePLY(path string, n, bands int, seed uint64) error {
	props := []string{"x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2"}
	rest := 0
	if bands == 3 {
		rest = 45
	}
	for i := 0; i < rest; i++ {
		props = append(props, fmt.Sprintf("f_rest_%d", i))
	}
	props = append(props, "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	fmt.Fprintf(bw, "ply\nformat binary_little_endian 1.0\nelement vertex %d\n", n)
	for _, p := range props {
		fmt.Fprintf(bw, "property float %s\n", p)
	}
	bw.WriteString("end_header\n")
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	rec := make([]float32, len(props))
	for i := 0; i < n; i++ {
		for k := 0; k < 3; k++ {
			rec[k] = float32(r.NormFloat64() * 2)
			rec[3+k] = float32(r.Float64()*3 - 1.5)
		}
		o := 6
		for k := 0; k < rest; k++ {
			rec[o+k] = float32(r.NormFloat64() * 0.1)
		}
		o += rest
		rec[o] = float32(r.Float64()*6 - 2)
		for k := 1; k <= 3; k++ {
			rec[o+k] = float32(r.Float64()*4 - 6)
		}
		var q [4]float64
		var l float64
		for k := range q {
			q[k] = r.NormFloat64()
			l += q[k] * q[k]
		}
		for k := range q {
			rec[o+4+k] = float32(q[k] / math.Sqrt(l))
		}
		if err := binary.Write(bw, binary.LittleEndian, rec); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// TestSplatTransformFormats converts each scene into .ply, .compressed.ply,
// .spz, bundled .sog and an unbundled SOG folder with splat-transform. Its
// SOG encoder runs on the CPU and takes minutes for 20,000 splats with
// SH 3 (its SH palette k-means is written for a GPU), so for that scene the
// unbundled folder is the entries of splat-transform's own bundle, unpacked
// (the files it writes into a folder are the same set under the same
// names; their palette differs from run to run, its k-means being seeded
// at random). The scenes run two at a time.
func TestSplatTransformFormats(t *testing.T) {
	st := splatTransform(t)
	var accepted, rejected atomic.Int64
	scenes := []struct {
		n, bands int
		unpack   bool // the folder from the bundle, not a second encode
	}{{20000, 3, true}, {20000, 0, false}, {5000, 3, false}, {5000, 0, false}}
	t.Cleanup(func() {
		t.Logf("splat-transform lane: %d files accepted, %d truncated or corrupted copies rejected", accepted.Load(), rejected.Load())
	})
	for i, sc := range scenes {
		t.Run(fmt.Sprintf("%d-sh%d", sc.n, sc.bands), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			in := filepath.Join(dir, "scene.ply")
			if err := writeScenePLY(in, sc.n, sc.bands, uint64(1000+i)); err != nil {
				t.Fatal(err)
			}
			outs := []string{"st.ply", "scene.compressed.ply", "scene.spz", "scene.sog", "unbundled/meta.json"}
			for _, o := range outs {
				out := filepath.Join(dir, o)
				if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
					t.Fatal(err)
				}
				if o == "unbundled/meta.json" && sc.unpack {
					unpackSOG(t, filepath.Join(dir, "scene.sog"), filepath.Dir(out))
					continue
				}
				cmd := exec.Command(st, "-q", "-w", "-g", "cpu", in, out)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("splat-transform %s: %v\n%s", o, err, b)
				}
			}
			for _, o := range append([]string{"scene.ply"}, outs...) {
				path := filepath.Join(dir, o)
				info, err := Check(path)
				if err != nil {
					t.Errorf("%s: %v", o, err)
					continue
				}
				if info.Vertices != int64(sc.n) {
					t.Errorf("%s: %d splats, want %d", o, info.Vertices, sc.n)
				}
				accepted.Add(1)
				rejected.Add(int64(checkDamaged(t, path, info.Kind)))
				keepFile(t, filepath.Join(fmt.Sprintf("%d-sh%d", sc.n, sc.bands), o), path, info.Kind)
			}
		})
	}
}

// unpackSOG writes the entries of a bundled SOG as files of dir.
func unpackSOG(t *testing.T, sog, dir string) {
	zr, err := zip.OpenReader(sog)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(rc)
		rc.Close()
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, filepath.Base(f.Name)), b.Bytes(), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// keepFile copies an accepted file (a folder's files, for a SOG folder)
// under $SPLATD_FORMATS_KEEP/files/rel, for the lane's `splatd validate`.
func keepFile(t *testing.T, rel, path string, kind Kind) {
	keep := os.Getenv("SPLATD_FORMATS_KEEP")
	if keep == "" {
		return
	}
	src, dst := []string{path}, filepath.Dir(filepath.Join(keep, "files", rel))
	if kind == KindSOGFolder {
		entries, _ := os.ReadDir(filepath.Dir(path))
		src = src[:0]
		for _, e := range entries {
			src = append(src, filepath.Join(filepath.Dir(path), e.Name()))
		}
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range src {
		b, err := os.ReadFile(p)
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, filepath.Base(p)), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// checkDamaged makes truncated and corrupted copies of a valid file (or of
// a folder's files) and requires Check to reject every one. It returns how
// many were rejected.
func checkDamaged(t *testing.T, path string, kind Kind) int {
	t.Helper()
	if kind == KindSOGFolder {
		return checkDamagedFolder(t, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	copies := map[string][]byte{
		"half":           data[:len(data)/2],
		"minus one byte": data[:len(data)-1],
		"trailing byte":  append(bytes.Clone(data), 0),
		"corrupted":      corrupt(t, data, kind),
	}
	n := 0
	for what, c := range copies {
		p := filepath.Join(t.TempDir(), filepath.Base(path))
		if err := os.WriteFile(p, c, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Check(p); err == nil {
			t.Errorf("%s (%s) %s: accepted", filepath.Base(path), kind, what)
		} else {
			n++
		}
	}
	return n
}

// corrupt damages the part of a file that a reader relies on: a PLY's
// vertex count, an SPZ's table of contents or gzip payload, the bytes of a
// SOG's meta.json inside the ZIP (its CRC no longer matches).
func corrupt(t *testing.T, data []byte, kind Kind) []byte {
	c := bytes.Clone(data)
	switch kind {
	case KindPLY, KindCompressedPLY:
		i := bytes.Index(c, []byte("element vertex "))
		c[i+len("element vertex ")]++ // another count: the body no longer fits
	case KindSPZ:
		if c[0] == 0x1f {
			c[len(c)/2] ^= 0xff // gzip's CRC catches it
		} else {
			c[spzHeaderV4+2*16+8] ^= 0x01 // stream 2's declared size
		}
	case KindSOG:
		zr, err := zip.NewReader(bytes.NewReader(c), int64(len(c)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			if f.Name == "meta.json" {
				off, _ := f.DataOffset()
				c[off+int64(f.CompressedSize64/2)] ^= 0xff
			}
		}
	default:
		t.Fatalf("no corruption for kind %s", kind)
	}
	return c
}

// checkDamagedFolder copies the folder and damages it: a named image
// missing, an image cut short, meta.json cut short, an image with bytes
// appended.
func checkDamagedFolder(t *testing.T, metaPath string) int {
	src := filepath.Dir(metaPath)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	var image string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".webp") {
			image = e.Name()
			break
		}
	}
	damage := map[string]func(dir string){
		"image missing":   func(d string) { os.Remove(filepath.Join(d, image)) },
		"image cut":       func(d string) { truncate(d, image, 1) },
		"meta.json cut":   func(d string) { truncate(d, SOGMeta, 10) },
		"image trailing":  func(d string) { appendTo(d, image, "\x00") },
		"meta.json empty": func(d string) { os.WriteFile(filepath.Join(d, SOGMeta), nil, 0o644) },
	}
	n := 0
	for what, fn := range damage {
		dir := t.TempDir()
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(src, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644)
		}
		fn(dir)
		if _, err := Check(filepath.Join(dir, SOGMeta)); err == nil {
			t.Errorf("unbundled SOG, %s: accepted", what)
		} else if !errors.Is(err, ErrIncomplete) && what == "image missing" {
			t.Errorf("unbundled SOG, %s: %v, want incomplete", what, err)
		} else {
			n++
		}
	}
	return n
}
