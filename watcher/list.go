package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Listed is one file a single scan finds under a root, as the daemon's
// scan would: Skip is empty for a candidate, else why it is not one.
type Listed struct {
	Candidate
	Skip string
}

// List walks the roots once, with the rules of a scan (include/exclude,
// recursive, nested roots, follow_symlinks, min/max size, min_age), and
// returns every file but splatd's own, each with the reason it would be
// skipped, if any (its name, its kind, its size or age). It watches nothing and waits for nothing
// (a file still being written is listed as it is now): `splatd run
// -dry-run` predicts a run with it.
func List(cfgs []Root, now time.Time) ([]Listed, error) {
	fsys := new(trustfs.FS)
	roots, err := buildRoots(cfgs, fsys)
	if err != nil {
		return nil, err
	}
	fsys.SetFolders(rootPaths(roots))
	w := &Watcher{roots: roots}
	var out []Listed
	for _, r := range roots {
		listed, err := w.listRoot(r, now)
		out = append(out, listed...)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, fmt.Errorf("watcher: list %s: %w", r.path, err)
		}
	}
	return out, nil
}

// listRoot is List of the root r, walked through an os.Root on it (as a
// scan walks): no folder or stat leads out of it.
func (w *Watcher) listRoot(r *root, now time.Time) ([]Listed, error) {
	rt, err := r.fs.OpenRoot(r.path)
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	var out []Listed
	err = fs.WalkDir(rt.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		top, p := rel == ".", filepath.Join(r.path, filepath.FromSlash(rel))
		if err != nil {
			if top {
				return err
			}
			return nil
		}
		if d.IsDir() {
			if !top && (!r.Recursive || r.skipsDir(d.Name()) || w.otherRoot(p, r)) {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := rt.Lstat(filepath.FromSlash(rel))
		if !r.wants(d.Name()) {
			if why := r.unwanted(d.Name()); why != "" {
				l := Listed{Candidate: Candidate{Path: p, Root: r.Path}, Skip: why}
				if err == nil {
					l.Size, l.ModTime = fi.Size(), fi.ModTime()
				}
				out = append(out, l)
			}
			return nil
		}
		if err != nil {
			return nil
		}
		l := Listed{Candidate: Candidate{Path: p, Root: r.Path, Size: fi.Size(), ModTime: fi.ModTime()}}
		if fi, ok := r.candidateInfo(p, fi); !ok {
			l.Skip = "not a regular file (or a link the folder's follow_symlinks does not follow)"
		} else {
			l.Size, l.ModTime = fi.Size(), fi.ModTime()
			l.Skip = r.bounds(p, l.Size, l.ModTime, now)
		}
		out = append(out, l)
		return nil
	})
	return out, err
}

// unwanted says why the rules leave a file out by its name: an exclude
// pattern, or no include pattern; "" for splatd's own files (ownFile),
// which are no candidates by design.
func (r *root) unwanted(name string) string {
	lower := strings.ToLower(name)
	if ownFile(lower) {
		return ""
	}
	for _, p := range r.exclude {
		if p.match(lower) {
			return fmt.Sprintf("excluded by the folder's pattern %q", p.glob)
		}
	}
	var include []string
	for _, p := range r.include {
		include = append(include, p.glob)
	}
	return fmt.Sprintf("not matched by the folder's include patterns (%s)", strings.Join(include, ", "))
}

// bounds says why a settled file of this size and mtime is not yet (or
// never) a candidate: the folder's size bounds or min_age; "" when it is.
func (r *root) bounds(path string, size int64, mtime, now time.Time) string {
	if r.MinAge > 0 && now.Before(mtime.Add(r.MinAge)) {
		return fmt.Sprintf("younger than the folder's min_age %s: looked at again once old enough", r.MinAge)
	}
	return r.outside(path, size)
}

// outside says why a file of this size is outside the folder's size
// bounds, "" when it is inside or is a SOG folder's meta.json, whose bundle
// the bounds apply to instead (folderHandle).
func (r *root) outside(path string, size int64) string {
	if filepath.Base(path) == folderHandle {
		return ""
	}
	return state.OutsideBounds(size, r.MinSize, r.MaxSize)
}
