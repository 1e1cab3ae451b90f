package splatfile

import (
	"archive/zip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// zipSize is the size of the ZIP archive/zip writes of entries of these
// names and sizes (zero bytes), with the bundle's headers: what bundleSize
// must predict.
func zipSize(t *testing.T, names []string, sizes []int64) int64 {
	t.Helper()
	var cw countWriter
	zw := zip.NewWriter(&cw)
	buf := make([]byte, 1<<20)
	for i, name := range names {
		fw, err := zw.CreateHeader(bundleHeader(name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyBuffer(fw, io.LimitReader(zeros{}, sizes[i]), buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return cw.n
}

// TestBundleSize: the size a folder's bundle is judged by before it is
// built (bundleSize, from the files' stat) is the size archive/zip writes,
// also past 4 GiB, where an entry, its offset or the directory's take the
// ZIP64 records.
func TestBundleSize(t *testing.T) {
	t.Parallel()
	const max32 = 1<<32 - 1
	tests := []struct {
		name  string
		names []string
		sizes []int64
	}{
		{"none", nil, nil},
		{"small", []string{"meta.json", "a.webp", "longer-name.webp"}, []int64{900, 0, 70000}},
		{"an entry of 4 GiB - 2", []string{"a.webp", "meta.json"}, []int64{max32 - 1, 10}},
		{"an entry of 4 GiB - 1", []string{"a.webp", "meta.json"}, []int64{max32, 10}},
		{"an entry past 4 GiB", []string{"meta.json", "a.webp"}, []int64{10, max32 + 8}},
		{"an offset past 4 GiB", []string{"a.webp", "b.webp", "meta.json"}, []int64{1 << 31, 1 << 31, 10}},
		{"the directory just past 4 GiB", []string{"a.webp", "meta.json"}, []int64{max32 - 100, 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := bundleSize(tt.names, tt.sizes), zipSize(t, tt.names, tt.sizes); got != want {
				t.Errorf("bundleSize = %d, archive/zip writes %d bytes", got, want)
			}
		})
	}
}

// openSparseFolder writes a folder of n images of imageSize bytes each,
// sparse (WriteSparseSOGFolder), and returns it open and checked.
func openSparseFolder(t *testing.T, imageSize int64) SOGFolder {
	t.Helper()
	dir := t.TempDir()
	if err := WriteSparseSOGFolder(dir, 100, imageSize); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f, err := CheckSOGFolderIn(r, filepath.Join(dir, SOGMeta))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSOGFolderSizedByStat: a folder of five sparse 400 MiB images passes
// the check, which sizes its bundle (2 GiB and its ZIP records) from the
// files' stat, so that a caller can refuse it before anything is built.
func TestSOGFolderSizedByStat(t *testing.T) {
	t.Parallel()
	const image = 400 << 20
	f := openSparseFolder(t, image)
	if len(f.Files) != 6 {
		t.Fatalf("files %q, want meta.json and five images", f.Files)
	}
	meta, err := os.Stat(filepath.Join(f.Dir, SOGMeta))
	if err != nil {
		t.Fatal(err)
	}
	overhead := f.Size - 5*image - meta.Size()
	if overhead <= 0 || overhead > 1024 {
		t.Errorf("Info.Size = %d: %d bytes beside meta.json and the images, want the ZIP's few hundred", f.Size, overhead)
	}
}

// cancelAfter is a writer that cancels a context once it has taken n bytes.
type cancelAfter struct {
	n, got int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if c.got += int64(len(p)); c.got >= c.n {
		c.cancel()
	}
	return len(p), nil
}

// TestBuildSOGBundleStopsWithContext: a context that ends while a bundle
// is built stops the build within a MiB of reading, with the context's
// error, and a context that had ended stops it before it writes anything.
func TestBuildSOGBundleStopsWithContext(t *testing.T) {
	t.Parallel()
	f := openSparseFolder(t, 64<<20)
	ctx, cancel := context.WithCancel(t.Context())
	w := &cancelAfter{n: 8 << 20, cancel: cancel}
	err := BuildSOGBundle(ctx, w, f)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("BuildSOGBundle = %v, want the context's error", err)
	}
	if w.got > w.n+1<<20+4096 {
		t.Errorf("%d bytes written, the context ended at %d: checked less often than every MiB", w.got, w.n)
	}

	var sink countWriter
	if _, err := HashSOGBundle(ctx, f); !errors.Is(err, context.Canceled) {
		t.Errorf("HashSOGBundle on an ended context = %v", err)
	}
	if err := BuildSOGBundle(ctx, &sink, f); !errors.Is(err, context.Canceled) || sink.n > 100 {
		t.Errorf("BuildSOGBundle on an ended context = %v after %d bytes", err, sink.n)
	}
}

// TestBuildSOGBundleHoldsToTheCheckedSize: an image grown after the check
// (a writer truncating it up to gigabytes once the bound was judged) fails
// the build, which writes no more than the size the check found.
func TestBuildSOGBundleHoldsToTheCheckedSize(t *testing.T) {
	t.Parallel()
	f := openSparseFolder(t, 1<<20)
	if err := os.Truncate(filepath.Join(f.Dir, f.Files[len(f.Files)-1]), 1<<30); err != nil {
		t.Fatal(err)
	}
	var sink countWriter
	err := BuildSOGBundle(t.Context(), &sink, f)
	if err == nil {
		t.Fatal("a bundle was built of an image grown since the check")
	}
	if sink.n > f.Size {
		t.Errorf("%d bytes written, more than the %d checked", sink.n, f.Size)
	}
}
