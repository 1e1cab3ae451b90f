package content

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/splatd/splatd/uploader/splatfile"
)

// cancelOnPoll is a context that ends at its n-th poll of Err: a build
// that checks it between reads is cancelled part-way, with no timing.
type cancelOnPoll struct {
	context.Context
	cancel context.CancelFunc
	left   atomic.Int32
}

func newCancelOnPoll(t *testing.T, n int32) *cancelOnPoll {
	ctx, cancel := context.WithCancel(t.Context())
	c := &cancelOnPoll{Context: ctx, cancel: cancel}
	c.left.Store(n)
	return c
}

func (c *cancelOnPoll) Err() error {
	if c.left.Add(-1) == 0 {
		c.cancel()
	}
	return c.Context.Err()
}

// checkedSparseFolder writes a folder of five sparse images of imageSize
// bytes and returns it checked, open until the test ends.
func checkedSparseFolder(t *testing.T, imageSize int64) splatfile.SOGFolder {
	t.Helper()
	dir := t.TempDir()
	if err := splatfile.WriteSparseSOGFolder(dir, 100, imageSize); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	f, err := splatfile.CheckSOGFolderIn(r, filepath.Join(dir, splatfile.SOGMeta))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestBuildBundleCancelled: a build whose context ends part-way (a
// SIGTERM) returns the context's error at its next MiB, and leaves neither
// its temporary file nor a bundle. It once read every image to the end
// (io.Copy), for minutes on a folder of sparse gigabytes, past systemd's
// stop timeout.
func TestBuildBundleCancelled(t *testing.T) {
	t.Parallel()
	f := checkedSparseFolder(t, 16<<20)
	dir := t.TempDir()
	ctx := newCancelOnPoll(t, 20) // in the second image
	_, _, err := buildBundle(ctx, f, filepath.Join(dir, "b.sog"), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("buildBundle = %v, want the context's error", err)
	}
	if polls := 20 - ctx.left.Load(); polls != 20 {
		t.Errorf("the context was polled %d times; the build should stop at the poll that ended it, the 20th", polls)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v in the bundle folder", entries)
	}
}

// TestPrepareOneShotBundlesAFolderOnce: a folder within its bounds is
// bundled into a temporary folder of its own ($TMPDIR), as FOLDER.sog,
// and SHA256 is that file's (hashed as it was written); Close removes it.
// A build whose context ends part-way returns the context's error and
// leaves nothing; a folder over the bounds is refused before it is built.
func TestPrepareOneShotBundlesAFolderOnce(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // not parallel
	dir := filepath.Join(t.TempDir(), "lobby")
	if err := splatfile.WriteSparseSOGFolder(dir, 100, 4<<20); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(dir, splatfile.SOGMeta)
	src, err := PrepareOneShot(t.Context(), meta, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(src.Path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != src.SHA256 || filepath.Base(src.Path) != "lobby.sog" || int64(len(b)) != src.Info.Size {
		t.Errorf("bundle %s of %d bytes, sha256 %x; PrepareOneShot said %s, %d bytes", src.Path, len(b), sum, src.SHA256, src.Info.Size)
	}
	src.Close()
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left after Close: %v", left)
	}
	ctx := newCancelOnPoll(t, 10)
	if _, err := PrepareOneShot(ctx, meta, 0, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("PrepareOneShot under a context that ends = %v, want the context's error", err)
	}
	if _, err := PrepareOneShot(t.Context(), meta, 0, 1<<20); err == nil || !strings.Contains(err.Error(), "not built or uploaded") {
		t.Errorf("PrepareOneShot over max_size = %v, want the bounds' reason", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("left by a cancelled build or a refused folder: %v", left)
	}
}
