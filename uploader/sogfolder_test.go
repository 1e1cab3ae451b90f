package uploader

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
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
	next, err := p.content.Check(t.Context(), j)
	if !errors.Is(err, step.ErrDrained) || next.Stage != state.Queued {
		t.Fatalf("the folder's check while draining = %s, %v; want queued, step.ErrDrained", next.Stage, err)
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
	next, err := p.content.Check(t.Context(), j)
	if !errors.Is(err, step.ErrDrained) || next.Stage != state.Queued || next.SHA256 != "" {
		t.Fatalf("the check while draining = %s (sha256 %q), %v; want queued, no hash, step.ErrDrained", next.Stage, next.SHA256, err)
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
