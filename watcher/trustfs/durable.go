package trustfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Durability: a step that a later one depends on (a receipt before its
// file leaves, a move's new name before its old one goes) is on disk
// before that later step starts. A file's data is fsynced before its name
// is made; a name made, renamed or removed is fsynced in its folder; a
// folder made is fsynced in its parent. docs/durability.md lists the orders.

// Note reports to Trace a step that a caller took itself (a link it made).
// The steps are "create", "rename", "link", "unlink", "rmdir", "mkdir",
// "fsync" (a file's data) and "fsync-dir", each with the name it acts on.
func (t *FS) Note(op, path string) { t.note(op, path) }

func (t *FS) note(op, path string) {
	if t != nil && t.Trace != nil {
		t.Trace(op, path)
	}
}

// SyncFile fsyncs the data of f, the file at path.
func (t *FS) SyncFile(f *os.File, path string) error {
	if err := f.Sync(); err != nil {
		return err
	}
	t.note("fsync", path)
	return nil
}

// SyncDir fsyncs the folder dir (a path the operator configured, such as
// a success_dir), so that the names made or removed in it last a power cut.
func (t *FS) SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // a folder cannot be fsynced there; NTFS journals names
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	t.note("fsync-dir", dir)
	return nil
}

// syncIn is SyncDir of rel, a folder under r, at path abs.
func (t *FS) syncIn(r *os.Root, rel, abs string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := r.Open(rel)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	t.note("fsync-dir", abs)
	return nil
}

// MkdirDurable makes the folder dir and its missing parents, as
// os.MkdirAll does, and returns once dir's name is durable from base down:
// each folder it made is fsynced in its parent, and so is each folder
// between base and dir that already existed (made by a run that crashed
// before it synced them). base is an operator's folder at or above dir.
func (t *FS) MkdirDurable(base, dir string, perm fs.FileMode) error {
	base, dir = filepath.Clean(base), filepath.Clean(dir)
	var levels []string // dir up to the first existing folder, or base
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err == nil && !fi.IsDir() {
			return &fs.PathError{Op: "mkdir", Path: p, Err: errors.New("not a directory")}
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		rel, below := Within(base, p)
		if err == nil && (!below || rel == ".") {
			break
		}
		levels = append(levels, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(levels) - 1; i >= 0; i-- {
		p := levels[i]
		err := os.Mkdir(p, perm)
		switch {
		case err == nil:
			t.note("mkdir", p)
		case errors.Is(err, fs.ErrExist):
			if fi, serr := os.Stat(p); serr != nil || !fi.IsDir() {
				return err
			}
		default:
			return err
		}
		if err := t.SyncDir(filepath.Dir(p)); err != nil {
			return err
		}
	}
	return nil
}
