//go:build !linux

package watcher

import "os"

// readDir lists the folder d is open on; every type is typeUnknown, so each
// entry is stat'ed.
func readDir(d *os.Root) ([]dirEntry, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	out := make([]dirEntry, len(names))
	for i, n := range names {
		out[i] = dirEntry{name: n, typ: typeUnknown}
	}
	return out, err
}
