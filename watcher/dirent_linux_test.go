package watcher

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/splatd/splatd/watcher/trustfs"
)

// TestDirFileLstat holds the scan's own fstatat to os.Lstat: name, size,
// mode, mtime, directory and ID of every kind of entry a folder may hold,
// and nil for a name that is gone or would leave the folder.
func TestDirFileLstat(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(dir, "scan.ply"), []byte("ply\n12345"), 0o640))
	must(os.WriteFile(filepath.Join(dir, "setuid"), nil, 0o755))
	must(os.Chmod(filepath.Join(dir, "setuid"), 0o4755|fs.ModeSetuid))
	must(os.Mkdir(filepath.Join(dir, "sub"), 0o1750))
	must(os.Chmod(filepath.Join(dir, "sub"), 0o750|fs.ModeSticky|fs.ModeSetgid))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "link.ply")))
	must(syscall.Mkfifo(filepath.Join(dir, "fifo.ply"), 0o600))

	_, df := openTestDir(t, dir)
	ents, err := df.readDir(func(dirEntry) bool { return true })
	must(err)
	var names []string
	for _, e := range ents {
		names = append(names, e.name)
	}
	if len(names) != 5 {
		t.Fatalf("listed %v, want 5 entries", names)
	}
	names = append(names, "gone.ply", "..", "sub/../../x")
	infos := make([]fs.FileInfo, len(names))
	df.lstat(names, infos)
	for k, n := range names[:5] {
		want, err := os.Lstat(filepath.Join(dir, n))
		must(err)
		got := infos[k]
		if got == nil {
			t.Errorf("%s: no stat", n)
			continue
		}
		if got.Name() != want.Name() || got.Size() != want.Size() || got.Mode() != want.Mode() ||
			!got.ModTime().Equal(want.ModTime()) || got.IsDir() != want.IsDir() {
			t.Errorf("%s: got %s %d %v %v dir=%v, os.Lstat %s %d %v %v dir=%v", n,
				got.Name(), got.Size(), got.Mode(), got.ModTime(), got.IsDir(),
				want.Name(), want.Size(), want.Mode(), want.ModTime(), want.IsDir())
		}
		if g, w := trustfs.IDOf(got), trustfs.IDOf(want); g != w || g == (trustfs.ID{}) {
			t.Errorf("%s: ID %v, os.Lstat's %v", n, g, w)
		}
	}
	for k, n := range names[5:] {
		if fi := infos[5+k]; fi != nil {
			t.Errorf("%q: stat'ed as %v, want nil", n, fi.Mode())
		}
	}
}

// TestReadDirKeeps lists a folder longer than one getdents buffer and
// keeps only the entries keep accepts, each under its own name.
func TestReadDirKeeps(t *testing.T) {
	dir := t.TempDir()
	want := map[string]bool{}
	for i := range 3000 {
		name := fmt.Sprintf("take-%04d.ply", i)
		if i%3 == 0 {
			name += ".splat.json"
		} else {
			want[name] = true
		}
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, df := openTestDir(t, dir)
	ents, err := df.readDir(func(e dirEntry) bool { return strings.HasSuffix(e.name, ".ply") })
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range ents {
		if !want[e.name] || got[e.name] {
			t.Errorf("listed %q: not wanted or twice", e.name)
		}
		got[e.name] = true
	}
	if len(got) != len(want) {
		t.Errorf("listed %d of the %d wanted entries", len(got), len(want))
	}
}
