package splatfile

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeSOGDir unpacks the sample bundle of n splats into a new folder and
// returns the path of its meta.json.
func writeSOGDir(t testing.TB, n int) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteSOG(&b, n); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range zr.File {
		rc, _ := f.Open()
		data, _ := io.ReadAll(rc)
		rc.Close()
		if err := os.WriteFile(filepath.Join(dir, f.Name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, SOGMeta)
}

func bundleSum(t *testing.T, f SOGFolder) ([]byte, [32]byte) {
	t.Helper()
	r, err := os.OpenRoot(f.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if f, err = CheckSOGFolderIn(r, filepath.Join(f.Dir, SOGMeta)); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := BuildSOGBundle(t.Context(), &b, f); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), sha256.Sum256(b.Bytes())
}

func TestCheckSOGFolder(t *testing.T) {
	t.Parallel()
	meta := writeSOGDir(t, 100)
	f, err := CheckSOGFolder(meta)
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != KindSOGFolder || f.Vertices != 100 || len(f.Files) != 6 || f.Files[0] != "means_l.webp" {
		t.Fatalf("folder = %+v", f)
	}
	if info, err := Check(meta); err != nil || info != f.Info {
		t.Fatalf("Check(meta.json) = %+v, %v; want %+v", info, err, f.Info)
	}
	data, sum := bundleSum(t, f)
	if int64(len(data)) != f.Size {
		t.Errorf("bundle is %d bytes, Info.Size %d", len(data), f.Size)
	}
	// The bundle is a valid .sog with the same count.
	info, err := check(bytes.NewReader(data), int64(len(data)), ".sog")
	if err != nil || info.Kind != KindSOG || info.Vertices != 100 {
		t.Fatalf("bundle check = %+v, %v", info, err)
	}
	// Same files, other times and another folder: same bytes.
	other := writeSOGDir(t, 100)
	old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	for _, name := range f.Files {
		os.Chtimes(filepath.Join(filepath.Dir(other), name), old, old)
	}
	f2, err := CheckSOGFolder(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, sum2 := bundleSum(t, f2); sum2 != sum {
		t.Error("the same files in another folder with other times give another bundle")
	}
	if !f2.Latest.Equal(old) {
		t.Errorf("Latest = %v, want %v", f2.Latest, old)
	}
	// A changed image changes the bundle.
	img := filepath.Join(filepath.Dir(other), "sh0.webp")
	b, _ := os.ReadFile(img)
	b[len(b)-1] ^= 1
	os.WriteFile(img, b, 0o644)
	f3, _ := CheckSOGFolder(other)
	if _, sum3 := bundleSum(t, f3); sum3 == sum {
		t.Error("a changed image gives the same bundle")
	}
}

// TestCheckSOGFolderNoLinks: an image name that is a link (to a file
// outside the folder, or inside it) is not read into the bundle, and a
// folder checked with its root open still refuses a link swapped in after
// the check.
func TestCheckSOGFolderNoLinks(t *testing.T) {
	t.Parallel()
	meta := writeSOGDir(t, 100)
	dir := filepath.Dir(meta)
	outside := filepath.Join(t.TempDir(), "secret.webp")
	img := filepath.Join(dir, "means_l.webp")
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, err := CheckSOGFolderIn(r, meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(img); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, img); err != nil {
		t.Fatal(err)
	}
	if err := BuildSOGBundle(t.Context(), io.Discard, f); err == nil {
		t.Error("a bundle was built through an image swapped for a link out of the folder")
	}
	if _, err := CheckSOGFolder(meta); err == nil {
		t.Error("a folder whose image is a link out of it passed the check")
	}
}

func TestCheckSOGFolderBad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, want, reason string
		edit               func(dir string)
	}{
		{"missing image", "incomplete", "waiting for quats.webp", func(d string) { os.Remove(filepath.Join(d, "quats.webp")) }},
		{"short image", "incomplete", "scales.webp is", func(d string) { truncate(d, "scales.webp", 1) }},
		{"image header only", "incomplete", "sh0.webp is 5 bytes so far", func(d string) { truncateTo(d, "sh0.webp", 5) }},
		{"image trailing bytes", "invalid", "more than its RIFF header", func(d string) { appendTo(d, "means_u.webp", "xx") }},
		{"not webp", "invalid", "not a WebP image", func(d string) { os.WriteFile(filepath.Join(d, "means_l.webp"), []byte("PNG............"), 0o644) }},
		{"image is a folder", "invalid", "not a regular file", func(d string) {
			os.Remove(filepath.Join(d, "quats.webp"))
			os.Mkdir(filepath.Join(d, "quats.webp"), 0o755)
		}},
		{"path in meta", "invalid", "not a plain file name", func(d string) { editMeta(d, "quats.webp", "../quats.webp") }},
		{"meta names itself", "invalid", "not a plain file name", func(d string) { editMeta(d, "quats.webp", "meta.json") }},
		{"meta not json", "invalid", "not a JSON object", func(d string) { os.WriteFile(filepath.Join(d, SOGMeta), []byte("{"), 0o644) }},
		{"meta lacks sh0", "invalid", `lacks "sh0"`, func(d string) { editMeta(d, `"sh0"`, `"sh9"`) }},
		{"empty meta", "incomplete", "empty file", func(d string) { os.WriteFile(filepath.Join(d, SOGMeta), nil, 0o644) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			meta := writeSOGDir(t, 50)
			tt.edit(filepath.Dir(meta))
			_, err := Check(meta)
			assertOutcome(t, err, tt.want, tt.reason)
			if !strings.HasPrefix(err.Error(), meta+": ") {
				t.Errorf("error %q does not start with the path", err)
			}
		})
	}
	if _, err := CheckSOGFolder(filepath.Join(t.TempDir(), SOGMeta)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing meta.json: %v", err)
	}
}

func truncate(dir, name string, by int64) {
	fi, _ := os.Stat(filepath.Join(dir, name))
	os.Truncate(filepath.Join(dir, name), fi.Size()-by)
}

func truncateTo(dir, name string, n int64) { os.Truncate(filepath.Join(dir, name), n) }

func appendTo(dir, name, s string) {
	f, _ := os.OpenFile(filepath.Join(dir, name), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(s)
	f.Close()
}

func editMeta(dir, from, to string) {
	p := filepath.Join(dir, SOGMeta)
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte(from), []byte(to), 1), 0o644)
}

// FuzzSOGFolderMeta fuzzes the folder's meta.json parser: never a panic,
// every error a one-line problem.
func FuzzSOGFolderMeta(f *testing.F) {
	meta := writeSOGDir(f, 10)
	data, err := os.ReadFile(meta)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte(`{"means":{"files":["../x"]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := metaFiles(data)
		if err == nil {
			present := map[string]bool{SOGMeta: true}
			for _, name := range files {
				if name != filepath.Base(name) || name == ".." || name == SOGMeta {
					t.Fatalf("metaFiles let %q through", name)
				}
				present[name] = true
			}
			_, err = checkMeta(data, present)
		}
		var p *problem
		if err != nil && (!errors.As(err, &p) || strings.ContainsAny(err.Error(), "\n\r")) {
			t.Fatalf("error %T %q", err, err)
		}
	})
}

// TestKindFormats: what each kind is sent as under v1, and which kinds the
// legacy API takes.
func TestKindFormats(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		kind   Kind
		format string
		legacy bool
	}{
		{KindPLY, "ply", true}, {KindCompressedPLY, "ply", true}, {KindSOG, "sog", true},
		{KindSOGFolder, "sog", true}, {KindSPZ, "spz", false}, {"", "", false}, {"lcc", "", false},
	} {
		if got := tt.kind.SourceFormat(); got != tt.format {
			t.Errorf("%q.SourceFormat() = %q, want %q", tt.kind, got, tt.format)
		}
		if got := tt.kind.Legacy(); got != tt.legacy {
			t.Errorf("%q.Legacy() = %v, want %v", tt.kind, got, tt.legacy)
		}
	}
}

// TestCheckSOGTrailing: a bundle with bytes after its ZIP end record is
// invalid, as a PLY longer than its header is.
func TestCheckSOGTrailing(t *testing.T) {
	t.Parallel()
	sog := fixtures(t)["valid.sog"]
	for _, extra := range []string{"\x00", "garbage after the archive"} {
		data := append(bytes.Clone(sog), extra...)
		path := filepath.Join(t.TempDir(), "x.sog")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Check(path)
		assertOutcome(t, err, "invalid", "bytes after the ZIP's end record")
	}
}

// TestHashSOGFolderIn: the sha256 HashSOGFolderIn computes (nothing
// written) is the sha256 of the bundle BuildSOGBundle writes, and the size
// the check found from the files' stat is the bundle's.
func TestHashSOGFolderIn(t *testing.T) {
	t.Parallel()
	meta := writeSOGDir(t, 300)
	r, err := os.OpenRoot(filepath.Dir(meta))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	f, sum, err := HashSOGFolderIn(t.Context(), r, meta)
	if err != nil {
		t.Fatal(err)
	}
	b, want := bundleSum(t, f)
	if sum != hex.EncodeToString(want[:]) || f.Size != int64(len(b)) {
		t.Errorf("HashSOGFolderIn = %s, size %d; the built bundle's sha256 is %x, size %d", sum, f.Size, want, len(b))
	}
}
