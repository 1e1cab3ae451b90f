package after

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// step is one durable step as trustfs.FS.Trace sees it.
type step struct{ op, path string }

func (s step) String() string { return s.op + " " + s.path }

// traceSteps returns an FS that records the durable steps taken through it
// on paths under dirs, and the steps so far.
func traceSteps(t *testing.T, dirs ...string) (*trustfs.FS, func() []step) {
	t.Helper()
	var (
		mu    sync.Mutex
		steps []step
	)
	fsys := &trustfs.FS{Trace: func(op, path string) {
		for _, d := range dirs {
			if _, in := trustfs.Within(d, path); in {
				mu.Lock()
				steps = append(steps, step{op, path})
				mu.Unlock()
				return
			}
		}
	}}
	return fsys, func() []step {
		mu.Lock()
		defer mu.Unlock()
		return append([]step(nil), steps...)
	}
}

// inOrder fails t unless want occurs in got as a subsequence: each step
// after the one before it, whatever else happens in between.
func inOrder(t *testing.T, got []step, want ...step) {
	t.Helper()
	i := 0
	for _, s := range got {
		if i < len(want) && s == want[i] {
			i++
		}
	}
	if i < len(want) {
		var b strings.Builder
		for _, s := range got {
			fmt.Fprintf(&b, "\n\t%s", s)
		}
		t.Errorf("no %q after %v; the steps were:%s", want[i], want[:i], b.String())
	}
}

// TestMoveIsDurableBeforeTheSourceGoes is issue 36's power cut: the
// source's name is removed only once its new name, its folder's name in
// every folder the move made, and the receipt are on disk, and the removal
// is itself synced before Finish returns (the job is then recorded done).
// Not parallel: it traces, and replaces linkTo.
func TestMoveIsDurableBeforeTheSourceGoes(t *testing.T) {
	for _, cross := range []bool{false, true} {
		t.Run(fmt.Sprintf("across filesystems %v", cross), func(t *testing.T) {
			root, dest := t.TempDir(), t.TempDir()
			if cross {
				crossFS(t)
			}
			j, id := heldJob(t, root, "rig/day1/scan.ply")
			fsys, steps := traceSteps(t, root, dest)
			a := New(Options{FS: fsys, OnSuccess: "move", SuccessDir: dest, Receipt: true})
			fileRec, err := a.Finish(context.Background(), j)
			file := fileRec.File
			target := filepath.Join(dest, "rig", "day1", "scan.ply")
			if err != nil || file != target {
				t.Fatalf("Finish = %q, %v; want %q", file, err, target)
			}
			rig, day1 := filepath.Join(dest, "rig"), filepath.Join(dest, "rig", "day1")
			want := []step{
				{"mkdir", rig}, {"fsync-dir", dest},
				{"mkdir", day1}, {"fsync-dir", rig},
				{"rename", ReceiptPath(target)}, {"fsync-dir", day1},
			}
			if cross {
				want = append(want, step{"fsync", copyMark(target, id)})
			}
			want = append(want, step{"link", target}, step{"fsync-dir", day1},
				step{"unlink", j.Path}, step{"fsync-dir", filepath.Dir(j.Path)})
			inOrder(t, steps(), want...)
		})
	}
}

// TestMoveSyncsFoldersAnEarlierRunMade: a run that made the target's
// folders and crashed before it synced them leaves names a power cut may
// still take; the next run syncs them before the source goes.
func TestMoveSyncsFoldersAnEarlierRunMade(t *testing.T) {
	root, dest := t.TempDir(), t.TempDir()
	j, _ := heldJob(t, root, "rig/scan.ply")
	rig := filepath.Join(dest, "rig")
	if err := os.Mkdir(rig, 0o755); err != nil {
		t.Fatal(err)
	}
	fsys, steps := traceSteps(t, root, dest)
	if _, err := New(Options{FS: fsys, OnSuccess: "move", SuccessDir: dest}).Finish(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	inOrder(t, steps(), step{"fsync-dir", dest}, step{"link", filepath.Join(rig, "scan.ply")},
		step{"fsync-dir", rig}, step{"unlink", j.Path})
}

// TestDeleteIsDurable: the receipt beside a deleted file is on disk
// before the file's name goes, and the removal is synced in its folder.
func TestDeleteIsDurable(t *testing.T) {
	root := t.TempDir()
	j := afterTestJob(t, root, "scan.ply", state.Done)
	fsys, steps := traceSteps(t, root)
	if _, err := New(Options{FS: fsys, OnSuccess: "delete", Receipt: true}).Finish(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	inOrder(t, steps(), step{"rename", ReceiptPath(j.Path)}, step{"fsync-dir", root},
		step{"unlink", j.Path}, step{"fsync-dir", root})
}

// TestReceiptIsDurable: a receipt is a temp file fsynced, renamed to its
// name, and its folder fsynced.
func TestReceiptIsDurable(t *testing.T) {
	root := t.TempDir()
	j := afterTestJob(t, root, "scan.ply", state.Done)
	fsys, steps := traceSteps(t, root)
	if _, err := New(Options{FS: fsys, Receipt: true}).Finish(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	got := steps()
	if len(got) < 1 || got[0].op != "create" {
		t.Fatalf("steps %v; want a temp file created first", got)
	}
	inOrder(t, got, step{"fsync", got[0].path}, step{"rename", ReceiptPath(j.Path)}, step{"fsync-dir", root})
}
