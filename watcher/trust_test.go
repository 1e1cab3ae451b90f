package watcher

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/splatd/splatd/watcher/trustfs"
)

// TestStatThroughALinkOutIsRefused: a subfolder swapped for a link to a
// folder outside the root gives the tracker's and the scanner's stats an
// *EscapeError, never the outside file's stat, and its file is no
// candidate, with or without follow_symlinks.
func TestStatThroughALinkOutIsRefused(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.ply"), []byte("ply"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "sub", "secret.ply")
	for _, follow := range []bool{false, true} {
		roots, err := buildRoots([]Root{{Path: dir, Recursive: true, FollowSymlinks: follow}}, new(trustfs.FS))
		if err != nil {
			t.Fatal(err)
		}
		r := roots[0]
		r.resolve()
		var esc *trustfs.EscapeError
		if fi, err := r.lstat(p); !errors.As(err, &esc) {
			t.Errorf("follow %v: lstat through a link out = %v, %v; want an EscapeError", follow, fi, err)
		}
		if _, ok := r.candidateInfo(p, nil); ok {
			t.Errorf("follow %v: a file outside the root is a candidate", follow)
		}
	}
}

// TestSetRootsNamesTheFoldersToItsFS: the watcher names its roots to the FS
// it was given, at New and at each SetRoots (a reload): once a reload adds
// the folder that holds a root, the root is opened through it, and a link
// there out of it is refused. A refused SetRoots leaves the folders alone.
func TestSetRootsNamesTheFoldersToItsFS(t *testing.T) {
	t.Parallel()
	outer, outside := t.TempDir(), t.TempDir()
	inner := filepath.Join(outer, "client-a")
	if err := os.WriteFile(filepath.Join(outside, "secret.ply"), []byte("ply"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The outer folder's writer has put a link where the inner folder was.
	if err := os.Symlink(outside, inner); err != nil {
		t.Fatal(err)
	}
	fsys := new(trustfs.FS)
	w, err := New(Options{Roots: []Root{{Path: inner}}, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	if got := fsys.Folders(); !slices.Equal(got, []string{inner}) {
		t.Fatalf("folders after New: %v, want %v", got, []string{inner})
	}
	secret := filepath.Join(inner, "secret.ply")
	if f, _, err := fsys.OpenRegular(inner, secret); err == nil {
		f.Close() // in no other watch folder: its path is the operator's
	} else {
		t.Fatalf("before the reload: %v", err)
	}
	if err := w.SetRoots([]Root{{Path: outer}, {Path: inner}}); err != nil {
		t.Fatal(err)
	}
	if got := fsys.Folders(); !slices.Contains(got, inner) || !slices.Contains(got, outer) {
		t.Fatalf("folders after SetRoots: %v, want %s and %s", got, outer, inner)
	}
	var esc *trustfs.EscapeError
	if _, _, err := fsys.OpenRegular(inner, secret); !errors.As(err, &esc) {
		t.Errorf("after the reload, open through the swapped inner folder = %v; want an EscapeError", err)
	}
	if err := w.SetRoots([]Root{{Path: ""}}); err == nil {
		t.Fatal("an empty root path was accepted")
	}
	if got := fsys.Folders(); len(got) != 2 {
		t.Errorf("a refused SetRoots changed the folders to %v", got)
	}
}
