package sog

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

func scene(t *testing.T, n, bands int, seed uint64) (*Splats, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteScene(&buf, n, bands, seed); err != nil {
		t.Fatal(err)
	}
	ply := buf.Bytes()
	s, err := ReadPLY(bytes.NewReader(ply))
	if err != nil {
		t.Fatal(err)
	}
	return s, ply
}

func encode(t *testing.T, s *Splats) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := Encode(context.Background(), &out, s); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestRoundTrip encodes scenes and decodes them with Decode: every splat
// comes back (matched through the Morton order by its position) within the
// quantization each attribute group allows.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for _, bands := range []int{0, 3} {
		src, _ := scene(t, 3000, bands, 11)
		file := encode(t, src)
		got, err := Decode(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			t.Fatal(err)
		}
		if got.N != src.N || got.Bands != bands {
			t.Fatalf("bands %d: decoded %d splats, %d bands", bands, got.N, got.Bands)
		}
		match := matchByPosition(src, got)
		errs := groupRMSE(src, got, match)
		limits := map[string]float64{"positions": 2e-3, "dc": 0.02, "opacity": 0.02, "scales": 0.02, "rotations": 0.01, "shrest": 0.06}
		for g, lim := range limits {
			if bands == 0 && g == "shrest" {
				continue
			}
			if errs[g] > lim || math.IsNaN(errs[g]) {
				t.Errorf("bands %d: %s RMSE %.5f > %.5f", bands, g, errs[g], lim)
			}
		}
		t.Logf("bands %d: %d bytes; RMSE %v", bands, len(file), errs)
	}
}

// TestDeterministic: the same input gives the same bytes, whatever the
// goroutines' timing.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	s, _ := scene(t, 5000, 3, 5)
	a, b := encode(t, s), encode(t, s)
	if !bytes.Equal(a, b) {
		t.Fatal("two encodings of the same scene differ")
	}
}

func TestReadPLYRejects(t *testing.T) {
	t.Parallel()
	_, ply := scene(t, 10, 0, 1)
	cases := map[string][]byte{
		"truncated":  ply[:len(ply)-5],
		"not ply":    []byte("hello\n"),
		"ascii":      bytes.Replace(ply, []byte("binary_little_endian"), []byte("ascii"), 1),
		"no opacity": bytes.Replace(ply, []byte("property float opacity"), []byte("property float opacitx"), 1),
		"bad rest":   bytes.Replace(ply, []byte("property float nx"), []byte("property float f_rest_0"), 1),
	}
	for name, b := range cases {
		if _, err := ReadPLY(bytes.NewReader(b)); err == nil {
			t.Errorf("%s: read without error", name)
		} else if !strings.HasPrefix(err.Error(), "ply: ") {
			t.Errorf("%s: error %q does not name the format", name, err)
		}
	}
}

func TestPaletteSize(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]int{5000: 4096, 20000: 16384, 1000000: 65536, 100: 64, 1024: 1024, 2047: 1024} {
		if got := paletteSize(n); got != want {
			t.Errorf("paletteSize(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestPaletteBeatsRandom: the tree-structured palette's error is well below
// the error of a palette of the same size picked at random from the points
// (what one Lloyd step starts from).
func TestPaletteBeatsRandom(t *testing.T) {
	t.Parallel()
	s, _ := scene(t, 20000, 3, 3)
	d := RestCount(3)
	k := 1024
	pal := fitPalette(context.Background(), s.Rest, s.N, d, k)
	cent := pal.entries
	if len(cent)/d > k || len(cent)/d < k/2 {
		t.Fatalf("%d entries for k=%d", len(cent)/d, k)
	}
	ours := 0.0
	for i := 0; i < s.N; i++ {
		l := pal.label(s.Rest[i*d : (i+1)*d])
		ours += float64(sqDist(s.Rest[i*d:(i+1)*d], cent[int(l)*d:int(l+1)*d]))
	}
	r := rng(9)
	random := make([]float32, 0, k*d)
	for c := 0; c < k; c++ {
		i := int(r.next() % uint64(s.N))
		random = append(random, s.Rest[i*d:(i+1)*d]...)
	}
	base := 0.0
	for i := 0; i < s.N; i++ {
		p := s.Rest[i*d : (i+1)*d]
		c := nearest(p, random, d)
		base += float64(sqDist(p, random[c*d:(c+1)*d]))
	}
	if ours > 0.8*base {
		t.Fatalf("palette SSE %.3f is not clearly below random's %.3f", ours, base)
	}
	t.Logf("palette SSE %.3f, random %.3f", ours, base)
}

// FuzzReadPLY: any input either reads or fails with an error; a read
// scene has the count its columns hold.
func FuzzReadPLY(f *testing.F) {
	var b bytes.Buffer
	WriteScene(&b, 3, 1, 1)
	f.Add(b.Bytes())
	f.Add([]byte("ply\nformat binary_little_endian 1.0\nelement vertex 100000000\nproperty float x\nend_header\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadPLY(bytes.NewReader(data))
		if err != nil {
			return
		}
		if len(s.Pos) != 3*s.N || len(s.Opacity) != s.N || len(s.Rest) != s.N*RestCount(s.Bands) {
			t.Fatalf("%d splats with columns %d, %d, %d", s.N, len(s.Pos), len(s.Opacity), len(s.Rest))
		}
	})
}

// TestReadPLYDoubles: properties of other types than float are read too
// (here double, and an extra uchar property that is skipped).
func TestReadPLYDoubles(t *testing.T) {
	t.Parallel()
	names := []string{"x", "y", "z", "f_dc_0", "f_dc_1", "f_dc_2", "opacity", "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3"}
	var b bytes.Buffer
	b.WriteString("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty uchar red\n")
	for _, n := range names {
		b.WriteString("property double " + n + "\n")
	}
	b.WriteString("end_header\n")
	b.WriteByte(7)
	for i := range names {
		binary.Write(&b, binary.LittleEndian, float64(i)+0.5)
	}
	s, err := ReadPLY(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 1 || s.Bands != 0 || s.Pos[2] != 2.5 || s.DC[0][0] != 3.5 || s.Opacity[0] != 6.5 || s.Scale[2][0] != 9.5 || s.Rot[3][0] != 13.5 {
		t.Fatalf("read %+v", s)
	}
}

func TestSortFloats(t *testing.T) {
	t.Parallel()
	r := rng(3)
	v := make([]float32, 5000)
	for i := range v {
		v[i] = float32((r.unit() - 0.5) * math.Pow(10, float64(int(r.next()%12))-6))
	}
	v[0], v[1] = 0, float32(math.Copysign(0, -1))
	want := slices.Clone(v)
	slices.Sort(want)
	sortFloats(v)
	for i := range v {
		if v[i] != want[i] {
			t.Fatalf("index %d: %g, want %g", i, v[i], want[i])
		}
	}
}

// The codebook lookup agrees with the binary search on every value,
// repeated entries, the ends, infinities and NaN included.
func TestLookupMatchesBinarySearch(t *testing.T) {
	r := rng(7)
	vals := []float32{float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()), 0, -1e30, 1e30}
	for i := 0; i < 200000; i++ {
		vals = append(vals, float32((r.unit()-0.5)*8))
	}
	cb, _ := quantize1D(vals[:5000])
	cb[10], cb[11] = cb[12], cb[12] // repeated entries, as a short codebook's fill makes
	cb[200] = cb[199]
	lk := newLookup(cb)
	for _, v := range append(vals, cb...) {
		if got, want := lk.nearest(v), nearestSorted(cb, v); got != want {
			t.Fatalf("lookup of %v: %d, binary search %d", v, got, want)
		}
	}
	flat := make([]float32, 256) // a codebook of one value has no buckets
	if got := newLookup(flat).nearest(0); got != nearestSorted(flat, 0) {
		t.Fatalf("flat codebook: %d, want %d", got, nearestSorted(flat, 0))
	}
}

// A PLY cut short past the first chunk of records names the first splat
// it lacks.
func TestReadPLYNamesTheMissingSplat(t *testing.T) {
	var b bytes.Buffer
	if err := WriteScene(&b, 3000, 3, 5); err != nil {
		t.Fatal(err)
	}
	ply := b.Bytes()
	whole, err := ReadPLY(bytes.NewReader(ply))
	if err != nil {
		t.Fatal(err)
	}
	stride := 62 * 4 // x y z, normals, DC, 45 rest, opacity, scales, rotation
	cut := len(ply) - (3000-2500)*stride - 7
	_, err = ReadPLY(bytes.NewReader(ply[:cut]))
	if err == nil || !strings.Contains(err.Error(), "splat 2499 of 3000") {
		t.Fatalf("cut PLY: %v, want splat 2499 of 3000", err)
	}
	if whole.Rest[2999*45+44] == 0 || whole.Rot[3][2999] == 0 {
		t.Fatal("the last splat was not read")
	}
}

// TestTranscodeProgress: Progress counts the PLY's record bytes of every
// pass, never backwards, up to its total, and nothing past the records is
// read (the bytes after them are not the scene's).
func TestTranscodeProgress(t *testing.T) {
	t.Parallel()
	_, ply := scene(t, 2000, 1, 3)
	records := int64(2000 * recordLenFile(1))
	ply = append(ply, make([]byte, 4096)...)
	in := &countingReaderAt{r: bytes.NewReader(ply)}
	var last, total int64
	calls := 0
	o := Options{Progress: func(done, tot int64) {
		calls++
		if done < last || tot != total && total != 0 || done > tot {
			t.Errorf("progress %d of %d after %d of %d", done, tot, last, total)
		}
		last, total = done, tot
	}}
	dst := filepath.Join(t.TempDir(), "out.sog")
	if _, err := TranscodeTo(context.Background(), in, int64(len(ply)), dst, o); err != nil {
		t.Fatal(err)
	}
	if calls < 2 || last != total || total%records != 0 || total < 2*records {
		t.Errorf("%d calls, ended at %d of %d; want the total, a multiple of the %d record bytes", calls, last, total, records)
	}
	if max := int64(len(ply)) - 4096; in.end > max {
		t.Errorf("read up to byte %d; the records end at %d", in.end, max)
	}
}

// recordLenFile is the bytes of one WriteScene record at bands.
func recordLenFile(bands int) int { return 4 * (17 + RestCount(bands)) }

// countingReaderAt notes the furthest byte read through it.
type countingReaderAt struct {
	r   io.ReaderAt
	mu  sync.Mutex
	end int64
}

func (c *countingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.mu.Lock()
	c.end = max(c.end, off+int64(n))
	c.mu.Unlock()
	return n, err
}

// FuzzOpenPLY: the streaming reader the encoder uses takes any input
// without a panic, refuses a header that promises more records than the
// file holds before it allocates for them, and a pass hands over exactly
// the header's count.
func FuzzOpenPLY(f *testing.F) {
	var b bytes.Buffer
	WriteScene(&b, 3, 1, 1)
	f.Add(b.Bytes())
	f.Add(b.Bytes()[:b.Len()-5])
	f.Add([]byte("ply\nformat binary_little_endian 1.0\nelement vertex 100000000\nproperty float x\nend_header\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		src, err := openPLY(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if int64(src.count())*int64(src.lay.stride) > int64(len(data)) {
			t.Fatalf("opened %d records of %d bytes in a %d-byte file", src.count(), src.lay.stride, len(data))
		}
		seen := 0
		err = src.pass(context.Background(), recordLen(src.bands()), func(first int, recs []float32) error {
			if first != seen {
				t.Fatalf("run at %d, want %d", first, seen)
			}
			seen += len(recs) / recordLen(src.bands())
			return nil
		})
		if err != nil || seen != src.count() {
			t.Fatalf("pass: %v after %d of %d records", err, seen, src.count())
		}
	})
}

// paletteMSE fits a palette of k entries on every step-th splat of s, as
// the encoder does past maxSample splats, refined over every splat when
// refine, and returns the mean squared error of the splats' f_rest rows
// against their entries.
func paletteMSE(s *Splats, step, k int, refine bool) float64 {
	d := RestCount(s.Bands)
	var sample []float32
	for i := 0; i < s.N; i += step {
		sample = append(sample, s.Rest[i*d:(i+1)*d]...)
	}
	pal := fitPalette(context.Background(), sample, len(sample)/d, d, k)
	labels := make([]uint32, s.N)
	r := pal.newRefiner()
	for i := range labels {
		labels[i] = pal.label(s.Rest[i*d : (i+1)*d])
		r.add(s.Rest[i*d:(i+1)*d], labels[i], d)
	}
	if refine {
		pal.refine([]*refiner{r})
	}
	sse := 0.0
	for i, l := range labels {
		sse += float64(sqDist(s.Rest[i*d:(i+1)*d], pal.entries[int(l)*d:int(l+1)*d]))
	}
	return sse / float64(s.N)
}

// TestPaletteSampleError: a palette fitted on a sixth of the splats (the
// encoder's sample of a 6 M-splat scene) and refined over all of them is
// within 10 % of the error of one fitted on all of them, at the encoder's
// points an entry at 6 M (about 92 in all, 15 in the sample: 64k
// entries). SOG_PALETTE_SPLATS sets the scene's size (default 120,000;
// the palette is a 92nd of it).
func TestPaletteSampleError(t *testing.T) {
	t.Parallel()
	n := 120000
	if v, err := strconv.Atoi(os.Getenv("SOG_PALETTE_SPLATS")); err == nil && v > 0 {
		n = v
	}
	s, _ := scene(t, n, 3, 21)
	k := min(65536, n/92)
	full, sampled, refined := paletteMSE(s, 1, k, false), paletteMSE(s, 6, k, false), paletteMSE(s, 6, k, true)
	t.Logf("%d splats, %d entries: palette MSE %.6f fitted on all; on a sixth %.6f (%.3fx), refined %.6f (%.3fx)",
		n, k, full, sampled, sampled/full, refined, refined/full)
	if refined > 1.10*full {
		t.Errorf("the sampled and refined palette's error %.6f is more than 1.10x the full fit's %.6f", refined, full)
	}
}

// TestDecodeRecordsPaths: a PLY's records decode to the same floats
// through the runs copied as they are, the runs decoded value by value
// (a big-endian machine's) and the columns one by one.
func TestDecodeRecordsPaths(t *testing.T) {
	var b bytes.Buffer
	if err := WriteScene(&b, 50, 3, 4); err != nil {
		t.Fatal(err)
	}
	src, err := openPLY(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	stride, rl := src.lay.stride, recordLen(src.bands())
	buf := b.Bytes()[src.data : src.data+int64(src.count()*stride)]
	runs := floatRuns(src.cols)
	if len(runs) != 4 {
		t.Fatalf("runs %+v: want x..z, f_dc, f_rest and opacity..rot_3", runs)
	}
	decode := func(le bool, runs []floatRun) []float32 {
		defer func(was bool) { littleEndian = was }(littleEndian)
		littleEndian = le
		recs := make([]float32, src.count()*rl)
		decodeRecords(buf, stride, recs, rl, src.cols, runs)
		return recs
	}
	want := decode(false, nil)
	for _, got := range [][]float32{decode(true, runs), decode(false, runs)} {
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("value %d: %g, column by column %g", i, got[i], want[i])
			}
		}
	}
}

// TestPlanKeepsBytes: past the sample, an encoding in the least memory
// (the Morton keys taken on the palette's pass) and one with room to keep
// the positions (a pass each) write the same bytes.
func TestPlanKeepsBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes a scene past the sample twice")
	}
	n := maxSample + 50000
	var ply bytes.Buffer
	if err := WriteScene(&ply, n, 1, 6); err != nil {
		t.Fatal(err)
	}
	low, high := MinMemory(int64(n), 1), int64(4<<30)
	if p := makePlan(int64(n), 1, low); p.keepPos || !p.fuse {
		t.Fatalf("plan in %d bytes: %+v; want the fused pass", low, p)
	}
	if p := makePlan(int64(n), 1, high); !p.keepPos {
		t.Fatalf("plan in %d bytes: %+v; want the positions kept", high, p)
	}
	var out [2]bytes.Buffer
	for i, m := range []int64{low, high} {
		if _, err := Transcode(context.Background(), bytes.NewReader(ply.Bytes()), int64(ply.Len()), &out[i], Options{Memory: m}); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(out[0].Bytes(), out[1].Bytes()) {
		t.Fatalf("%d bytes in the least memory, %d with room: not the same", out[0].Len(), out[1].Len())
	}
}
