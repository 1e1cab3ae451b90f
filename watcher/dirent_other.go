//go:build !linux

package watcher

import (
	"io/fs"
	"os"
)

// dirFile is one folder open for a scan.
type dirFile struct {
	d *os.Root
	f *os.File
}

// openDir opens the folder d is open on.
func openDir(d *os.Root) (*dirFile, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, err
	}
	return &dirFile{d: d, f: f}, nil
}

func (d *dirFile) Close() error { return d.f.Close() }

// readDir lists the entries of the folder that keep accepts; every type is
// typeUnknown, so each entry is stat'ed.
func (d *dirFile) readDir(keep func(dirEntry) bool) ([]dirEntry, error) {
	names, err := d.f.Readdirnames(-1)
	out := make([]dirEntry, 0, len(names))
	for _, n := range names {
		if e := (dirEntry{name: n, typ: typeUnknown}); keep(e) {
			out = append(out, e)
		}
	}
	return out, err
}

// lstat sets infos[k] to the lstat of names[k] through the folder's
// os.Root, nil where it failed (vanished since the listing) or the name
// is "".
func (d *dirFile) lstat(names []string, infos []fs.FileInfo) {
	for k, n := range names {
		if n == "" {
			continue
		}
		if fi, err := d.d.Lstat(n); err == nil {
			infos[k] = fi
		}
	}
}
