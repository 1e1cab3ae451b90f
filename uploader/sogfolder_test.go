package uploader

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
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
)

// enqueueFolder writes an unbundled SOG folder of five sparse images of
// imageSize bytes each at e.files/rel and queues its meta.json under the
// watch root root.
func (e *workerEnv) enqueueFolder(rel, root string, imageSize int64) string {
	e.t.Helper()
	dir := filepath.Join(e.files, rel)
	if err := splatfile.WriteSparseSOGFolder(dir, 100, imageSize); err != nil {
		e.t.Fatal(err)
	}
	meta := filepath.Join(dir, splatfile.SOGMeta)
	fi, err := os.Stat(meta)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.EnqueueBatch(context.Background(), []queue.Candidate{{Path: meta, Root: root, Size: fi.Size(), ModTime: fi.ModTime()}}); err != nil {
		e.t.Fatal(err)
	}
	return meta
}

// TestFolderOutsideSizeBoundsIsNotBuilt: the watch folder's size bounds
// hold an unbundled SOG folder's bundle, sized from its files' stat (the
// watcher saw only meta.json): a folder of sparse images above max_size,
// or one whose bundle is below min_size, fails with the bounds as its
// reason, and nothing is built (the bundle folder is never made) or
// uploaded. It once built 2 GiB of sparse images into state_dir and
// uploaded them under a max_size of 1 MiB. A folder within the bounds is
// published.
func TestFolderOutsideSizeBoundsIsNotBuilt(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	floor := filepath.Join(e.files, "floor") // a root with a min_size
	big := e.enqueueFolder("big", e.files, 16<<20)
	small := e.enqueueFolder("floor/small", floor, 1<<10)
	o := e.options(2)
	o.WorkDir = e.stateDir
	o.Files = boundsFiles{SidecarFiles: o.Files.(SidecarFiles), bounds: func(root string) (int64, int64) {
		if root == floor {
			return 1 << 20, 0
		}
		return 0, 1 << 20
	}}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		big:   "above the size bound max_size 1.0 MiB (1048576 bytes)",
		small: "below the size bound min_size 1.0 MiB (1048576 bytes)",
	}
	for _, j := range e.jobs() {
		if j.Stage != state.Failed || !strings.Contains(j.FailReason, want[j.Path]) || !strings.Contains(j.FailReason, "bundle would be") {
			t.Errorf("%s: %s (%q), want failed: ~%q", j.Path, j.Stage, j.FailReason, want[j.Path])
		}
	}
	if _, err := os.Stat(filepath.Join(o.WorkDir, "sog-bundles")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the bundle folder was made (%v): a bundle was built", err)
	}
	if st := e.sim.Stats(); st.SignedURLs != 0 {
		t.Errorf("%d signed URLs: a folder outside the bounds was uploaded", st.SignedURLs)
	}

	within := e.enqueueFolder("within", e.files, 1<<10)
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	if j, err := e.store.JobByPath(within); err != nil || j.Stage != state.Done {
		t.Errorf("a folder within the bounds: %s (%s), %v", j.Stage, j.FailReason, err)
	}
}

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

// TestCheckFolderStopsWhenThePoolDrains: a folder's build stops as soon as
// the pool drains for shutdown, not at the end of its grace: nothing is
// committed (step.ErrDrained), the job stays queued, and no bundle or temporary
// file is left.
func TestCheckFolderStopsWhenThePoolDrains(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	meta := e.enqueueFolder("room", e.files, 16<<20)
	o := e.options(1)
	o.WorkDir = e.stateDir
	o.Now = func() time.Time { return time.Now().Add(time.Hour) } // the folder has settled
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	p.draining.Store(true)
	close(p.drainCh)
	j, err := e.store.JobByPath(meta)
	if err != nil {
		t.Fatal(err)
	}
	next, err := p.stepCheckFolder(t.Context(), j)
	if !errors.Is(err, step.ErrDrained) || next.Stage != state.Queued {
		t.Fatalf("stepCheckFolder while draining = %s, %v; want queued, step.ErrDrained", next.Stage, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(o.WorkDir, "sog-bundles")); len(entries) != 0 {
		t.Errorf("left %v in the bundle folder", entries)
	}
}

// TestCheckStopsHashingWhenThePoolDrains: a plain file's hash stops as soon
// as the pool drains for shutdown, as a folder's build does: a 4 GB file on
// a slow share no longer holds SIGTERM for the whole read. Nothing is
// committed (step.ErrDrained) and the job stays queued, without a hash.
func TestCheckStopsHashingWhenThePoolDrains(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	path := e.writePLY("big.ply", 1000)
	e.enqueue(path)
	p, err := NewPool(e.options(1))
	if err != nil {
		t.Fatal(err)
	}
	p.draining.Store(true)
	close(p.drainCh)
	j, err := e.store.JobByPath(path)
	if err != nil {
		t.Fatal(err)
	}
	next, err := p.stepCheck(t.Context(), j)
	if !errors.Is(err, step.ErrDrained) || next.Stage != state.Queued || next.SHA256 != "" {
		t.Fatalf("stepCheck while draining = %s (sha256 %q), %v; want queued, no hash, step.ErrDrained", next.Stage, next.SHA256, err)
	}
}

// TestFileOutsideSizeBoundsIsNotHashed: a file the watcher found within
// the bounds and that grew past max_size before its check (a sparse
// terabyte written over a queued file) fails with the bounds as its
// reason; it is not hashed or uploaded.
func TestFileOutsideSizeBoundsIsNotHashed(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	grown := e.writePLY("grown.ply", 100)
	if err := os.Truncate(grown, 64<<20); err != nil {
		t.Fatal(err)
	}
	e.enqueue(grown)
	o := e.options(1)
	o.Files = boundsFiles{SidecarFiles: o.Files.(SidecarFiles), bounds: func(string) (int64, int64) { return 0, 1 << 20 }}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j, err := e.store.JobByPath(grown)
	if err != nil || j.Stage != state.Failed || !strings.Contains(j.FailReason, "above the size bound max_size 1.0 MiB (1048576 bytes)") {
		t.Errorf("grown.ply: %s (%q), %v; want failed on the bounds", j.Stage, j.FailReason, err)
	}
	if j.SHA256 != "" {
		t.Errorf("grown.ply was hashed (%s)", j.SHA256)
	}
	if st := e.sim.Stats(); st.SignedURLs != 0 {
		t.Errorf("%d signed URLs: a file outside the bounds was uploaded", st.SignedURLs)
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
