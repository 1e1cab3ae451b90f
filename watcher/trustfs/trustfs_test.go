package trustfs

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t *testing.T, p, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRegularRefuses: every kind of path a folder writer can put where
// a file was is refused with its kind, never followed or waited on.
func TestOpenRegularRefuses(t *testing.T) {
	var tfs FS
	root, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "secret"), "secret", 0o600)
	write(t, filepath.Join(root, "ok.ply"), "ply", 0o644)
	write(t, filepath.Join(root, "in.ply"), "ply", 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "out-link.ply"))
	os.Symlink("in.ply", filepath.Join(root, "in-link.ply"))
	os.Symlink("/dev/zero", filepath.Join(root, "zero.ply"))
	os.Symlink(outside, filepath.Join(root, "sub"))
	os.Mkdir(filepath.Join(root, "dir.ply"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(root, "fifo.ply"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"out-link.ply": "symbolic link",
		"in-link.ply":  "symbolic link",
		"zero.ply":     "symbolic link",
		"dir.ply":      "directory",
		"fifo.ply":     "named pipe",
		"sub/secret":   "leads out of the watch folder",
		"../x":         "leads out of the watch folder",
	} {
		f, _, err := tfs.OpenRegular(root, filepath.Join(root, name))
		if err == nil {
			f.Close()
			t.Errorf("%s: opened; want refused (%s)", name, want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", name, err, want)
		}
		var inv interface{ Invalid() bool }
		if !errors.As(err, &inv) || !inv.Invalid() {
			t.Errorf("%s: %T is not an invalid-file error", name, err)
		}
	}
	f, fi, err := tfs.OpenRegular(root, filepath.Join(root, "ok.ply"))
	if err != nil || fi.Size() != 3 {
		t.Fatalf("ok.ply: %v, %v", fi, err)
	}
	f.Close()
	// Following, as follow_symlinks does: inside yes, outside never.
	if f, _, err := tfs.OpenRegularFollow(root, filepath.Join(root, "in-link.ply")); err != nil {
		t.Errorf("follow in-link.ply: %v", err)
	} else {
		f.Close()
	}
	for _, name := range []string{"out-link.ply", "zero.ply", "sub/secret"} {
		if f, _, err := tfs.OpenRegularFollow(root, filepath.Join(root, name)); err == nil {
			f.Close()
			t.Errorf("follow %s: opened", name)
		}
	}
	if _, err := tfs.Lstat(root, filepath.Join(root, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v; want fs.ErrNotExist", err)
	}
}

func TestReadSmallCap(t *testing.T) {
	var tfs FS
	root := t.TempDir()
	p := filepath.Join(root, "s.yaml")
	write(t, p, strings.Repeat("a", 100), 0o644)
	if b, err := tfs.ReadSmall(root, p, 100); err != nil || len(b) != 100 {
		t.Errorf("at the cap: %d bytes, %v", len(b), err)
	}
	var tl *TooLargeError
	if _, err := tfs.ReadSmall(root, p, 99); !errors.As(err, &tl) {
		t.Errorf("over the cap: %v; want *TooLargeError", err)
	}
}

func TestRemoveIfOnlyTheHeldFile(t *testing.T) {
	var tfs FS
	root := t.TempDir()
	p := filepath.Join(root, "a.ply")
	write(t, p, "one", 0o644)
	fi, _ := os.Lstat(p)
	held := IDOf(fi)
	write(t, p+".new", "two", 0o644)
	if err := os.Rename(p+".new", p); err != nil { // another file under the same name
		t.Fatal(err)
	}
	var re *ReplacedError
	if err := tfs.RemoveIf(root, p, held); !errors.As(err, &re) {
		t.Fatalf("RemoveIf = %v; want *ReplacedError", err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal("the new file was removed")
	}
	fi, _ = os.Lstat(p)
	if err := tfs.RemoveIf(root, p, IDOf(fi)); err != nil {
		t.Fatal(err)
	}
}

func TestWriteAtomicReplacesLink(t *testing.T) {
	var tfs FS
	root, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "v")
	write(t, victim, "keep", 0o600)
	p := filepath.Join(root, "r.json")
	os.Symlink(victim, p)
	if err := tfs.WriteAtomic(root, p, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("written through the link: %q", b)
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("receipt: %v, %v", fi, err)
	}
	// A folder swapped for a link out: refused.
	os.Symlink(outside, filepath.Join(root, "sub"))
	if err := tfs.WriteAtomic(root, filepath.Join(root, "sub", "r.json"), []byte("{}"), 0o644); err == nil {
		t.Error("wrote through a linked subfolder")
	}
	if _, err := os.Lstat(filepath.Join(outside, "r.json")); err == nil {
		t.Error("a file appeared outside")
	}
}

// TestWithin: a name below root is within it even when it begins with two
// dots; ".." and what lies beyond it are not.
func TestWithin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		rel  string
		in   bool
	}{
		{"/srv/in", ".", true},
		{"/srv/in/a.ply", "a.ply", true},
		{"/srv/in/..published", "..published", true},
		{"/srv/in/..d/x.ply", "..d/x.ply", true},
		{"/srv", "..", false},
		{"/srv/other", "../other", false},
		{"/srv/in2/a.ply", "../in2/a.ply", false},
	} {
		rel, in := Within("/srv/in", tc.path)
		if in != tc.in || (in && rel != tc.rel) {
			t.Errorf("Within(/srv/in, %s) = %q, %v; want %q, %v", tc.path, rel, in, tc.rel, tc.in)
		}
	}
}

// TestNestedWatchFolderOpenedThroughTheOuter: a watch folder inside another
// one is opened through the outer one, so that the outer folder's writer
// who replaces it by a link to a folder outside gets every access refused;
// a link that stays inside the outer folder still works, and a folder that
// lies in no other one is opened by its path, a link or not (the operator's
// choice).
func TestNestedWatchFolderOpenedThroughTheOuter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outer, outside := filepath.Join(dir, "share"), filepath.Join(dir, "outside")
	inner := filepath.Join(outer, "client-a")
	for _, d := range []string{inner, outside, filepath.Join(outer, "other")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(outside, "secret.ply"), filepath.Join(outer, "other", "mine.ply")} {
		if err := os.WriteFile(f, []byte("ply\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tfs := new(FS)
	tfs.SetFolders([]string{outer, inner})
	swap := func(target string) {
		t.Helper()
		if err := os.RemoveAll(inner); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, inner); err != nil {
			t.Fatal(err)
		}
	}

	swap(outside)
	var esc *EscapeError
	if _, _, err := tfs.OpenRegular(inner, filepath.Join(inner, "secret.ply")); !errors.As(err, &esc) {
		t.Errorf("open through a link out of the outer folder: %v, want an EscapeError", err)
	}
	if err := tfs.WriteAtomic(inner, filepath.Join(inner, "secret.ply.splat.json"), []byte("{}"), 0o644); !errors.As(err, &esc) {
		t.Errorf("write through a link out of the outer folder: %v, want an EscapeError", err)
	}
	if _, err := os.Lstat(filepath.Join(outside, "secret.ply.splat.json")); err == nil {
		t.Error("a file was written outside")
	}
	if r, err := tfs.OpenRoot(inner); !errors.As(err, &esc) {
		if r != nil {
			r.Close()
		}
		t.Errorf("OpenRoot of the swapped folder: %v, want an EscapeError", err)
	}

	swap("other") // relative: os.Root takes no absolute link
	if f, _, err := tfs.OpenRegular(inner, filepath.Join(inner, "mine.ply")); err != nil {
		t.Errorf("open through a link inside the outer folder: %v", err)
	} else {
		f.Close()
	}

	// Not a nested folder: its own path may be a link (as configured).
	tfs.SetFolders([]string{inner}) // a reload that drops the outer folder
	swap(outside)
	if f, _, err := tfs.OpenRegular(inner, filepath.Join(inner, "secret.ply")); err != nil {
		t.Errorf("a watch folder that is itself a link, in no other: %v", err)
	} else {
		f.Close()
	}
}

// TestMkdirDurable: every folder made is fsynced in its parent, and so is
// every folder between base and dir that was there already; base's own
// parent is left alone.
func TestMkdirDurable(t *testing.T) {
	base := t.TempDir()
	old := filepath.Join(base, "old")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	var got []string
	tfs := &FS{Trace: func(op, path string) { got = append(got, op+" "+path) }}
	dir := filepath.Join(old, "a", "b")
	if err := tfs.MkdirDurable(base, dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"fsync-dir " + base,
		"mkdir " + filepath.Join(old, "a"), "fsync-dir " + old,
		"mkdir " + dir, "fsync-dir " + filepath.Join(old, "a"),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Errorf("%s: %v", dir, err)
	}
	write(t, filepath.Join(base, "file"), "x", 0o644)
	if err := tfs.MkdirDurable(base, filepath.Join(base, "file", "sub"), 0o755); err == nil {
		t.Error("made a folder under a file")
	}
}

// TestRemoveIfIsDurable: a removal is fsynced in its folder.
func TestRemoveIfIsDurable(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "sub", "scan.ply")
	write(t, p, "ply", 0o644)
	var got []string
	tfs := &FS{Trace: func(op, path string) { got = append(got, op+" "+path) }}
	if err := tfs.RemoveIf(root, p, ID{}); err != nil {
		t.Fatal(err)
	}
	if want := "unlink " + p + "\nfsync-dir " + filepath.Dir(p); strings.Join(got, "\n") != want {
		t.Errorf("steps %q, want %q", got, want)
	}
}

// TestStatThroughALinkOutIsRefused: a subfolder swapped for a link out of
// the root gives every stat an *EscapeError, never the outside file's.
func TestStatThroughALinkOutIsRefused(t *testing.T) {
	t.Parallel()
	root, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "secret.ply"), "ply", 0o644)
	if err := os.Symlink(outside, filepath.Join(root, "sub")); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "sub", "secret.ply")
	var tfs FS
	stats := map[string]func(root, path string) (fs.FileInfo, error){
		"Lstat": tfs.Lstat, "StatRegular": tfs.StatRegular, "StatFollow": tfs.StatFollow,
	}
	for name, stat := range stats {
		var esc *EscapeError
		if fi, err := stat(root, p); !errors.As(err, &esc) {
			t.Errorf("%s through a link out = %v, %v; want an EscapeError", name, fi, err)
		}
	}
}

// TestOpenInRefuses: OpenIn, in a folder already open, refuses what
// OpenRegular refuses at a name (a link, a FIFO, a folder).
func TestOpenInRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ok.webp"), "RIFF", 0o644)
	if err := os.Symlink("ok.webp", filepath.Join(dir, "link.webp")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.webp"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.webp"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, name := range []string{"link.webp", "fifo.webp", "dir.webp"} {
		var nr *NotRegularError
		if f, _, err := OpenIn(r, name); !errors.As(err, &nr) {
			if f != nil {
				f.Close()
			}
			t.Errorf("OpenIn(%s) = %v; want a NotRegularError", name, err)
		}
	}
	f, fi, err := OpenIn(r, "ok.webp")
	if err != nil || fi.Size() != 4 {
		t.Fatalf("OpenIn(ok.webp) = %v, %v", fi, err)
	}
	f.Close()
}

// TestNoPackageState: the package keeps no variable of its own; the watch
// folders and the trace are an FS's.
func TestNoPackageState(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR {
				t.Errorf("%s: a package-level var", fset.Position(g.Pos()))
			}
		}
	}
}

// TestLstatRootThroughTheOuter: a nested watch folder's own stat goes
// through the outer folder, so a folder between the two swapped for a link
// out is refused; a folder in no other is stat'ed by its path.
func TestLstatRootThroughTheOuter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outer, outside := filepath.Join(dir, "share"), filepath.Join(dir, "outside")
	inner := filepath.Join(outer, "mid", "client-a")
	if err := os.MkdirAll(filepath.Join(outside, "client-a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(outer, "mid")); err != nil {
		t.Fatal(err)
	}
	tfs := new(FS)
	tfs.SetFolders([]string{inner})
	if fi, err := tfs.LstatRoot(inner); err != nil || !fi.IsDir() {
		t.Fatalf("LstatRoot in no other folder = %v, %v; want the folder", fi, err)
	}
	tfs.SetFolders([]string{outer, inner})
	var esc *EscapeError
	if fi, err := tfs.LstatRoot(inner); !errors.As(err, &esc) {
		t.Errorf("LstatRoot through a link out of the outer folder = %v, %v; want an EscapeError", fi, err)
	}
}

// TestRootOf: the innermost watch folder holding a path, or none.
func TestRootOf(t *testing.T) {
	t.Parallel()
	tfs := new(FS)
	tfs.SetFolders([]string{"/w", "/w/a", "/x"})
	for path, want := range map[string]string{
		"/w/f.ply": "/w", "/w/a/f.ply": "/w/a", "/w/a": "/w/a", "/w/ab/f.ply": "/w", "/y/f.ply": "", "/x/..f": "/x",
	} {
		if got := tfs.RootOf(path); got != want {
			t.Errorf("RootOf(%s) = %q, want %q", path, got, want)
		}
	}
}
