package after

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// names lists the files under dir, relative to it ("" when dir is gone).
func names(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// withReceipt is a folder's file names and its receipt's, sorted.
func withReceipt(files []string) []string {
	out := append(slices.Clone(files), ReceiptPath(splatfile.SOGMeta))
	slices.Sort(out)
	return out
}

// TestAfterActionsMoveAndDeleteASOGFolder: a published SOG folder's
// after-actions act on the folder, not on its meta.json alone: a move takes
// meta.json, the images it names and the folder's sidecar to the same
// place under success_dir (a second folder of that name to FOLDER.1), and
// removes the folder left empty; a file meta.json does not name stays, and
// so does the folder holding it. A delete removes the folder's files and
// sidecar and leaves the folder with its receipt. Both once acted on
// meta.json alone and split the folder.
func TestAfterActionsMoveAndDeleteASOGFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox, done := filepath.Join(dir, "inbox"), filepath.Join(dir, "done")
	folder := func(name string) (meta string, files []string) {
		p := filepath.Join(inbox, "shoot", name)
		writeSOGFolder(t, p, 1000)
		if err := os.WriteFile(filepath.Join(inbox, "shoot", name+".splat.yaml"), []byte("title: x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(p, splatfile.SOGMeta), names(t, p)
	}
	run := New(Options{OnSuccess: "move", SuccessDir: done, Receipt: true})
	meta, files := folder("room")
	job := state.Job{ID: 1, File: state.File{Path: meta, Root: inbox, SHA256: "ab"}, Stage: state.Done, Splat: state.Splat{SplatID: "s1"}}
	movedRec, err := run.Finish(context.Background(), job)
	moved := movedRec.File
	want := filepath.Join(done, "shoot", "room", splatfile.SOGMeta)
	if err != nil || moved != want {
		t.Fatalf("Finish = %q, %v; want %q", moved, err, want)
	}
	if got, want := names(t, filepath.Dir(want)), withReceipt(files); !slices.Equal(got, want) {
		t.Errorf("moved folder holds %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(inbox, "shoot", "room")); !os.IsNotExist(err) {
		t.Errorf("the folder left empty was not removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(done, "shoot", "room.splat.yaml")); err != nil {
		t.Errorf("the folder's sidecar did not travel with it: %v", err)
	}

	// A second folder "room" (another shoot of the same name), with a file
	// meta.json does not name.
	meta, files = folder("room")
	if err := os.WriteFile(filepath.Join(filepath.Dir(meta), "notes.txt"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	movedRec, err = run.Finish(context.Background(), state.Job{ID: 2, File: state.File{Path: meta, Root: inbox, SHA256: "cd"}, Stage: state.Done, Splat: state.Splat{SplatID: "s2"}})
	moved = movedRec.File
	if want := filepath.Join(done, "shoot", "room.1", splatfile.SOGMeta); err != nil || moved != want {
		t.Fatalf("second folder: Finish = %q, %v; want %q", moved, err, want)
	}
	if got := names(t, filepath.Join(inbox, "shoot", "room")); !slices.Equal(got, []string{"notes.txt"}) {
		t.Errorf("the source folder holds %q, want only notes.txt", got)
	}
	if got, want := names(t, filepath.Join(done, "shoot", "room.1")), withReceipt(files); !slices.Equal(got, want) {
		t.Errorf("room.1 holds %q, want %q", got, want)
	}

	// Delete.
	meta, _ = folder("hall")
	del := New(Options{OnSuccess: "delete", Receipt: true})
	if _, err := del.Finish(context.Background(), state.Job{ID: 3, File: state.File{Path: meta, Root: inbox, SHA256: "ef"}, Stage: state.Done, Splat: state.Splat{SplatID: "s3"}}); err != nil {
		t.Fatal(err)
	}
	if got := names(t, filepath.Dir(meta)); !slices.Equal(got, []string{"meta.json.splat.json"}) {
		t.Errorf("after delete the folder holds %q, want its receipt only", got)
	}
	if _, err := os.Stat(filepath.Join(inbox, "shoot", "hall.splat.yaml")); !os.IsNotExist(err) {
		t.Errorf("the deleted folder's sidecar stayed: %v", err)
	}
}

// TestMoveFolderAfterACrash: a move interrupted after some images went
// finishes into the same folder under success_dir, and one interrupted
// after meta.json went (its last step) finds the folder there.
func TestMoveFolderAfterACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	inbox, done := filepath.Join(dir, "inbox"), filepath.Join(dir, "done")
	src := filepath.Join(inbox, "room")
	writeSOGFolder(t, src, 1000)
	files := names(t, src)
	target := filepath.Join(done, "room")
	if err := os.MkdirAll(target, 0o755); err != nil {
		t.Fatal(err)
	}
	// The crash: the first image had been moved.
	first := files[0]
	if first == splatfile.SOGMeta {
		first = files[1]
	}
	if err := os.Rename(filepath.Join(src, first), filepath.Join(target, first)); err != nil {
		t.Fatal(err)
	}
	meta := filepath.Join(src, splatfile.SOGMeta)
	got, err := moveFolderUnder(nil, meta, inbox, done, noPlace)
	if want := filepath.Join(target, splatfile.SOGMeta); err != nil || got != want {
		t.Fatalf("moveFolderUnder = %q, %v; want %q", got, err, want)
	}
	if moved := names(t, target); !slices.Equal(moved, files) {
		t.Errorf("the folder under success_dir holds %q, want %q", moved, files)
	}
	// Run again, as after a crash before the job recorded the move.
	got, err = moveFolderUnder(nil, meta, inbox, done, noPlace)
	if want := filepath.Join(target, splatfile.SOGMeta); err != nil || got != want {
		t.Errorf("again: moveFolderUnder = %q, %v; want %q", got, err, want)
	}
}

// noPlace is a move's place that writes nothing.
func noPlace(string) error { return nil }

// TestFolderMoveAfterACrashBetweenCopyAndRemoval: a SOG folder's move
// across filesystems that a crash stops after a file's copy reached the
// target is finished by the next Finish. Before its source was removed:
// that file moves again over its own leftover copy (it failed with "file
// exists" at every retry). After: the copy's mark is not left in the moved
// folder.
func TestFolderMoveAfterACrashBetweenCopyAndRemoval(t *testing.T) {
	for _, removed := range []bool{false, true} {
		dir := t.TempDir()
		inbox, done := filepath.Join(dir, "inbox"), filepath.Join(dir, "done")
		p := filepath.Join(inbox, "room")
		writeSOGFolder(t, p, 1000)
		files := names(t, p)
		meta := filepath.Join(p, splatfile.SOGMeta)
		job := state.Job{ID: 1, File: state.File{Path: meta, Root: inbox, SHA256: "ab"}, Stage: state.Done, Splat: state.Splat{SplatID: "s1"}}
		crossFS(t)
		type crash struct{}
		removeSource = func(fsys *trustfs.FS, r, src string, id trustfs.ID) error {
			if filepath.Base(src) == splatfile.SOGMeta {
				return fsys.RemoveIf(r, src, id)
			}
			if removed { // the first image's source is gone, its mark not yet
				if err := fsys.RemoveIf(r, src, id); err != nil {
					return err
				}
			}
			panic(crash{})
		}
		t.Cleanup(func() { removeSource = (*trustfs.FS).RemoveIf })
		run := New(Options{OnSuccess: "move", SuccessDir: done, Receipt: true})
		func() {
			defer func() {
				if r := recover(); r != (crash{}) {
					panic(r)
				}
			}()
			run.Finish(context.Background(), job)
			t.Fatal("no crash")
		}()

		removeSource = (*trustfs.FS).RemoveIf // the restart
		movedRec, err := run.Finish(context.Background(), job)
		moved := movedRec.File
		want := filepath.Join(done, "room", splatfile.SOGMeta)
		if err != nil || moved != want {
			t.Fatalf("source removed %v: Finish after the crash = %q, %v; want %q", removed, moved, err, want)
		}
		if got, want := names(t, filepath.Dir(want)), withReceipt(files); !slices.Equal(got, want) {
			t.Errorf("source removed %v: moved folder holds %q, want %q", removed, got, want)
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("source removed %v: the source folder is still there: %v", removed, err)
		}
	}
}
