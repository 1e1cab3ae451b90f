package watcher

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/splatd/splatd/watcher/trustfs"
)

// buildRoots checks and normalises the configured roots, innermost first,
// each to be read through fsys.
func buildRoots(cfgs []Root, fsys *trustfs.FS) ([]*root, error) {
	if len(cfgs) == 0 {
		return nil, errors.New("watcher: no roots")
	}
	var roots []*root
	seen := make(map[string]bool)
	for i, cfg := range cfgs {
		r, err := newRoot(cfg)
		if err != nil {
			return nil, fmt.Errorf("watcher: root %d (%q): %w", i, cfg.Path, err)
		}
		r.fs = fsys
		if seen[r.path] {
			return nil, fmt.Errorf("watcher: root %q listed twice", cfg.Path)
		}
		seen[r.path] = true
		roots = append(roots, r)
	}
	slices.SortStableFunc(roots, func(a, b *root) int { return len(b.path) - len(a.path) })
	return roots, nil
}

// rootPaths returns the paths of roots.
func rootPaths(roots []*root) []string {
	paths := make([]string, len(roots))
	for i, r := range roots {
		paths[i] = r.path
	}
	return paths
}

// root is a Root with its derived, normalised settings and runtime state.
type root struct {
	Root
	id               uint32      // distinct among the process's roots
	path             string      // absolute and clean
	fs               *trustfs.FS // every access under path goes through it
	include, exclude []pattern
	poll             bool
	pollEvery        time.Duration

	real     atomic.Pointer[string] // path with symlinks resolved, for containment checks
	healthy  atomic.Bool
	fallback atomic.Bool   // notify root polling because inotify ran out
	rescan   atomic.Bool   // a rescan was asked for (overflow, error, root event)
	scanNo   atomic.Uint32 // counts full scans; marks files seen by the latest
	scanned  atomic.Int64  // when the latest scan ended well (UnixNano); 0 before
	scanErr  atomic.Pointer[string]

	// Owned by the scanner goroutine.
	nextScan     time.Time
	lastWatchTry time.Time
	lastFull     time.Time // when the latest full scan that ended well began
	needFull     bool      // the next scan is full: a rescan was asked for
}

// rootIDs numbers the roots newRoot makes.
var rootIDs atomic.Uint32

func newRoot(cfg Root) (*root, error) {
	if cfg.Path == "" {
		return nil, errors.New("empty path")
	}
	abs, err := filepath.Abs(cfg.Path)
	if err != nil {
		return nil, err
	}
	r := &root{Root: cfg, id: rootIDs.Add(1), path: abs, pollEvery: cfg.PollInterval}
	switch cfg.Mode {
	case "", ModeNotify:
	case ModePoll:
		r.poll = true
	default:
		return nil, fmt.Errorf("mode %q: want %q or %q", cfg.Mode, ModeNotify, ModePoll)
	}
	if r.pollEvery <= 0 {
		r.pollEvery = DefaultPollInterval
	}
	if cfg.MinSize < 0 || cfg.MaxSize < 0 || cfg.MinAge < 0 {
		return nil, errors.New("negative size or age bound")
	}
	if cfg.MaxSize > 0 && cfg.MinSize > cfg.MaxSize {
		return nil, fmt.Errorf("min size %d is above max size %d", cfg.MinSize, cfg.MaxSize)
	}
	include, exclude := cfg.Include, cfg.Exclude
	if include == nil {
		include = DefaultInclude
	}
	if exclude == nil {
		exclude = DefaultExclude
	}
	for _, p := range append(slices.Clone(include), exclude...) {
		if _, err := filepath.Match(p, "x"); err != nil || strings.ContainsRune(p, filepath.Separator) {
			return nil, fmt.Errorf("bad pattern %q: a pattern matches a base name", p)
		}
	}
	for _, p := range include {
		r.include = append(r.include, compilePattern(strings.ToLower(p)))
	}
	for _, p := range exclude {
		r.exclude = append(r.exclude, compilePattern(strings.ToLower(p)))
	}
	return r, nil
}

// pattern is one include or exclude pattern, in lower case, with its
// shape found once: "*.ext", "prefix*" and a plain name are matched
// without filepath.Match.
type pattern struct {
	glob  string
	lit   string // the suffix, prefix or name of those shapes
	shape uint8
}

const (
	shapeGlob = iota
	shapeSuffix
	shapePrefix
	shapeName
)

func compilePattern(p string) pattern {
	const meta = `*?[\`
	switch {
	case len(p) > 1 && p[0] == '*' && !strings.ContainsAny(p[1:], meta):
		return pattern{glob: p, lit: p[1:], shape: shapeSuffix}
	case len(p) > 1 && p[len(p)-1] == '*' && !strings.ContainsAny(p[:len(p)-1], meta):
		return pattern{glob: p, lit: p[:len(p)-1], shape: shapePrefix}
	case !strings.ContainsAny(p, meta):
		return pattern{glob: p, lit: p, shape: shapeName}
	}
	return pattern{glob: p}
}

// match is filepath.Match of the pattern and name.
func (p pattern) match(name string) bool {
	switch p.shape {
	case shapeSuffix:
		return strings.HasSuffix(name, p.lit)
	case shapePrefix:
		return strings.HasPrefix(name, p.lit)
	case shapeName:
		return name == p.lit
	}
	ok, _ := filepath.Match(p.glob, name)
	return ok
}

// matchAny reports whether name, in any case, matches one of the patterns.
func matchAny(patterns []pattern, name string) bool {
	return matchLower(patterns, strings.ToLower(name))
}

// matchLower is matchAny of a name already in lower case.
func matchLower(patterns []pattern, name string) bool {
	for _, p := range patterns {
		if p.match(name) {
			return true
		}
	}
	return false
}

// wants reports whether a file's base name makes it a candidate. splatd's
// own files (sidecars, folder settings, receipts) never are, whatever the
// patterns say.
func (r *root) wants(name string) bool {
	lower := strings.ToLower(name)
	return !ownFile(lower) && matchLower(r.include, lower) && !matchLower(r.exclude, lower)
}

// ownFile reports whether a base name in lower case is one of splatd's own
// files: a sidecar, a receipt or a fleet announcement.
func ownFile(lower string) bool {
	return strings.HasSuffix(lower, sidecarSuffix) || strings.HasSuffix(lower, ".splat.json") || strings.HasSuffix(lower, ".splatd-peer")
}

// skipsDir reports whether a folder's base name keeps the walk out of it.
func (r *root) skipsDir(name string) bool { return matchAny(r.exclude, name) }

// within reports whether p is dir or inside it.
func within(dir, p string) bool {
	if p == dir {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(p, dir)
}

// candidateInfo returns the FileInfo of a file that may be a candidate: a
// regular file, or with FollowSymlinks a symlink resolving to a regular file
// inside the root. fi is the file's Lstat result if the caller has it.
func (r *root) candidateInfo(path string, fi fs.FileInfo) (fs.FileInfo, bool) {
	if fi == nil {
		var err error
		if fi, err = r.lstat(path); err != nil {
			return nil, false
		}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		if !r.FollowSymlinks {
			return nil, false
		}
		target, err := filepath.EvalSymlinks(path)
		if err != nil || !within(r.realPath(), target) {
			return nil, false
		}
		// The resolved name, through the root: a link swapped in since is
		// not followed.
		rel, _ := filepath.Rel(r.realPath(), target)
		if fi, err = r.lstat(filepath.Join(r.path, rel)); err != nil {
			return nil, false
		}
	}
	return fi, fi.Mode().IsRegular()
}

// lstat stats p, a path under the root, through an os.Root on it: a link
// on the way that leads out of the root is an error, not the outside
// file's stat.
func (r *root) lstat(p string) (fs.FileInfo, error) {
	if filepath.Clean(p) == r.path {
		return r.fs.LstatRoot(p)
	}
	return r.fs.Lstat(r.path, p)
}

// realPath is the root with symlinks resolved (refreshed by every scan).
func (r *root) realPath() string {
	if p := r.real.Load(); p != nil {
		return *p
	}
	return r.resolve()
}

func (r *root) resolve() string {
	p, err := filepath.EvalSymlinks(r.path)
	if err != nil {
		p = r.path
	}
	r.real.Store(&p)
	return p
}
