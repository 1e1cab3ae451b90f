package splatfile

import (
	"archive/zip"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the files in testdata/ from the sample writers")

// fixtures builds every file in testdata/ (and the fuzz seed corpus) from
// the deterministic sample writers, so the bytes are explained by code.
func fixtures(t testing.TB) map[string][]byte {
	t.Helper()
	gen := func(fn func(*bytes.Buffer) error) []byte {
		var b bytes.Buffer
		if err := fn(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	ply := gen(func(b *bytes.Buffer) error { return WritePLY(b, 8) })
	cply := gen(func(b *bytes.Buffer) error { return WriteCompressedPLY(b, 300) })
	sog := gen(func(b *bytes.Buffer) error { return WriteSOG(b, 100) })
	header := ply[:bytes.Index(ply, []byte("end_header\n"))]

	var nometa bytes.Buffer
	zw := zip.NewWriter(&nometa)
	fw, _ := zw.Create("means_l.webp")
	fw.Write([]byte("RIFF"))
	zw.Close()

	return map[string][]byte{
		"valid.ply":            ply,
		"valid-compressed.ply": cply,
		"valid.sog":            sog,
		"ascii.ply":            []byte("ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty float z\nend_header\n0 0 0\n1 1 1\n"),
		"empty.ply":            {},
		"empty.sog":            {},
		"garbage.ply":          []byte("hello, this is not a splat\n"),
		"truncated.ply":        ply[:len(ply)-100],
		"long.ply":             append(append([]byte{}, ply...), "0123456789"...),
		"unterminated.ply":     header,
		"notzip.sog":           []byte("this is not a zip archive\n"),
		"ply-as.sog":           ply,
		"nometa.sog":           nometa.Bytes(),
		"partial.sog":          sog[:len(sog)/2],
		"badchunks.ply":        bytes.Replace(cply, []byte("element chunk 2\n"), []byte("element chunk 1\n"), 1),
		"noxyz.ply":            []byte("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float a\nend_header\n\x00\x00\x00\x00"),
		"list.ply":             []byte("ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n"),
		"badline.ply":          []byte("ply\nformat binary_little_endian 1.0\nelement vertex ten\n"),
	}
}

// TestFixtures keeps testdata/ in step with the sample writers; run with
// -update after changing them.
func TestFixtures(t *testing.T) {
	want := fixtures(t)
	if *update {
		for name, data := range want {
			if err := os.WriteFile(filepath.Join("testdata", name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		writeSeeds(t, "FuzzPLYHeader", want, ".ply")
		writeSeeds(t, "FuzzSOG", want, ".sog")
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatalf("%v (run go test -run TestFixtures -update)", err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("testdata/%s differs from the sample writers (run go test -run TestFixtures -update)", name)
		}
	}
}

// writeSeeds writes the fixtures with extension ext, cut to the header (or
// kept whole when small), as a seed corpus in Go's native fuzz format.
func writeSeeds(t *testing.T, target string, files map[string][]byte, ext string) {
	dir := filepath.Join("testdata", "fuzz", target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if filepath.Ext(name) != ext || len(data) > 8<<10 {
			continue
		}
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if err := os.WriteFile(filepath.Join(dir, "seed-"+strings.TrimSuffix(name, ext)), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	const (
		valid      = "valid"
		incomplete = "incomplete"
		invalid    = "invalid"
	)
	tests := []struct {
		file     string
		want     string
		kind     Kind
		vertices int64
		reason   string // substring of the error text
	}{
		{file: "valid.ply", want: valid, kind: KindPLY, vertices: 8},
		{file: "valid-compressed.ply", want: valid, kind: KindCompressedPLY, vertices: 300},
		{file: "valid.sog", want: valid, kind: KindSOG, vertices: 100},
		{file: "ascii.ply", want: valid, kind: KindPLY, vertices: 2},
		{file: "empty.ply", want: incomplete, reason: "empty file (0 bytes)"},
		{file: "empty.sog", want: incomplete, reason: "empty file (0 bytes)"},
		{file: "garbage.ply", want: invalid, reason: "not a PLY, SOG or SPZ file"},
		{file: "truncated.ply", want: incomplete, reason: "body is"},
		{file: "long.ply", want: invalid, reason: "10 more than its header declares"},
		{file: "unterminated.ply", want: incomplete, reason: "no end_header"},
		{file: "notzip.sog", want: invalid, reason: "not a ZIP archive"},
		{file: "ply-as.sog", want: invalid, reason: "PLY content in a .sog file"},
		{file: "nometa.sog", want: invalid, reason: "no meta.json"},
		{file: "partial.sog", want: incomplete, reason: "central directory not written yet"},
		{file: "badchunks.ply", want: invalid, reason: "1 chunks for 300 vertices, want 2"},
		{file: "noxyz.ply", want: invalid, reason: "lacks float property x"},
		{file: "list.ply", want: invalid, reason: "list property"},
		{file: "badline.ply", want: invalid, reason: `bad count "ten"`},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join("testdata", tt.file)
			info, err := Check(path)
			assertOutcome(t, err, tt.want, tt.reason)
			if tt.want == valid {
				if info.Kind != tt.kind || info.Vertices != tt.vertices {
					t.Errorf("Info = %+v, want kind %s and %d vertices", info, tt.kind, tt.vertices)
				}
				if fi, _ := os.Stat(path); info.Size != fi.Size() {
					t.Errorf("Info.Size = %d, want %d", info.Size, fi.Size())
				}
			}
			if err != nil && err.Error() != path+": "+tt.want+": "+Reason(err) {
				t.Errorf("error %q is not PATH: %s: REASON (Reason %q)", err, tt.want, Reason(err))
			}
			if strings.HasPrefix(tt.file, "empty.") != errors.Is(err, ErrEmpty) {
				t.Errorf("errors.Is(%v, ErrEmpty) = %v", err, errors.Is(err, ErrEmpty))
			}
		})
	}
}

func assertOutcome(t *testing.T, err error, want, reason string) {
	t.Helper()
	var inv *InvalidError
	switch want {
	case "valid":
		if err != nil {
			t.Fatalf("Check: %v, want valid", err)
		}
		return
	case "incomplete":
		if !errors.Is(err, ErrIncomplete) {
			t.Fatalf("Check: %v, want ErrIncomplete", err)
		}
	case "invalid":
		if !errors.As(err, &inv) || !inv.Invalid() {
			t.Fatalf("Check: %v, want *InvalidError", err)
		}
		if errors.Is(err, ErrIncomplete) {
			t.Fatalf("Check: %v is both invalid and incomplete", err)
		}
	}
	if !strings.Contains(err.Error(), reason) {
		t.Errorf("Check: %q, want it to mention %q", err, reason)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("Check: %q spans lines", err)
	}
}

// TestCheckGrowing writes a valid PLY a few bytes at a time and checks that
// every prefix is incomplete, never invalid, until the last byte: a file in
// the middle of a copy must never fail its job.
func TestCheckGrowing(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"valid.ply", "valid-compressed.ply", "valid.sog"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		ext := filepath.Ext(name)
		for n := 0; n < len(data); n += 1 + n/16 {
			_, err := check(bytes.NewReader(data[:n]), int64(n), ext)
			if !errors.Is(err, ErrIncomplete) && !errors.Is(err, errEmpty) {
				t.Fatalf("%s cut at %d of %d bytes: %v, want incomplete", name, n, len(data), err)
			}
		}
		if _, err := check(bytes.NewReader(data), int64(len(data)), ext); err != nil {
			t.Fatalf("%s whole: %v", name, err)
		}
	}
}

// TestCheckLongHeader covers the 128 KiB bound: a header still going at
// that point is invalid, not incomplete.
func TestCheckLongHeader(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	b.WriteString("ply\nformat binary_little_endian 1.0\n")
	for b.Len() <= MaxHeader {
		b.WriteString("comment padding padding padding padding padding padding\n")
	}
	path := filepath.Join(t.TempDir(), "long-header.ply")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Check(path)
	assertOutcome(t, err, "invalid", "no end_header in the first 128 KiB")
}

func TestCheckNotRegular(t *testing.T) {
	t.Parallel()
	_, err := Check(t.TempDir())
	assertOutcome(t, err, "invalid", "not a regular file")
	if _, err := Check(filepath.Join(t.TempDir(), "missing.ply")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Check(missing) = %v, want os.ErrNotExist", err)
	}
}

// TestSampleDeterministic makes sure the writers give the same bytes twice
// (the fixtures and the demo rely on it) and larger outputs still pass.
func TestSampleDeterministic(t *testing.T) {
	t.Parallel()
	for name, fn := range map[string]func(*bytes.Buffer, int) error{
		"ply":            func(b *bytes.Buffer, n int) error { return WritePLY(b, n) },
		"compressed.ply": func(b *bytes.Buffer, n int) error { return WriteCompressedPLY(b, n) },
		"sog":            func(b *bytes.Buffer, n int) error { return WriteSOG(b, n) },
	} {
		var a, b bytes.Buffer
		if err := fn(&a, 1000); err != nil {
			t.Fatal(err)
		}
		fn(&b, 1000)
		if !bytes.Equal(a.Bytes(), b.Bytes()) {
			t.Errorf("%s: two runs differ", name)
		}
		info, err := check(bytes.NewReader(a.Bytes()), int64(a.Len()), "."+strings.TrimPrefix(filepath.Ext("x."+name), "."))
		if err != nil || info.Vertices != 1000 {
			t.Errorf("%s: check = %+v, %v", name, info, err)
		}
		if err := fn(&a, 0); err == nil {
			t.Errorf("%s: n=0 accepted", name)
		}
	}
}

// fuzzCheck is the shared body of the fuzz targets: never panic, and every
// answer is one of the three documented outcomes with a one-line reason.
func fuzzCheck(t *testing.T, data []byte, ext string) {
	info, err := check(bytes.NewReader(data), int64(len(data)), ext)
	if err == nil {
		if info.Size != int64(len(data)) {
			t.Fatalf("Info.Size = %d for %d bytes", info.Size, len(data))
		}
		if info.Kind != KindSOG && info.Vertices <= 0 {
			t.Fatalf("valid PLY with %d vertices", info.Vertices)
		}
		if (strings.HasPrefix(info.Encoding, "binary") || info.Kind == KindSPZ) && len(data) > 0 {
			// A valid binary file cut by one byte is a copy in progress.
			if _, err := check(bytes.NewReader(data[:len(data)-1]), int64(len(data)-1), ext); !errors.Is(err, ErrIncomplete) {
				t.Fatalf("valid binary file minus one byte: %v, want incomplete", err)
			}
		}
		return
	}
	var p *problem
	if !errors.Is(err, errEmpty) && !errors.As(err, &p) {
		t.Fatalf("unexpected error type %T: %v", err, err)
	}
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("reason spans lines: %q", err)
	}
}

func addSeeds(f *testing.F, ext string) {
	for name, data := range fixtures(f) {
		if filepath.Ext(name) == ext {
			f.Add(data)
		}
	}
}

func FuzzPLYHeader(f *testing.F) {
	addSeeds(f, ".ply")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, ".ply") })
}

func FuzzSOG(f *testing.F) {
	addSeeds(f, ".sog")
	f.Fuzz(func(t *testing.T, data []byte) { fuzzCheck(t, data, ".sog") })
}
