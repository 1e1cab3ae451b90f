package watcher

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/splatd/splatd/state"
)

// maxRetry bounds how long a missing or unreadable root waits between tries.
const maxRetry = 30 * time.Second

// scanLoop runs the startup scan of every root, then rescans each root when
// its interval passes or a rescan is asked for: periodic rescans of notify
// roots, every PollInterval for poll roots and roots in fallback, and
// retries of missing roots.
func (w *Watcher) scanLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		var next time.Time
		for _, r := range w.roots {
			if ctx.Err() != nil {
				return
			}
			if r.rescan.Swap(false) {
				r.needFull = true
			}
			if r.needFull || !now.Before(r.nextScan) {
				w.scanRoot(ctx, r)
			}
			if !r.nextScan.IsZero() && (next.IsZero() || r.nextScan.Before(next)) {
				next = r.nextScan
			}
		}
		var fire <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-fire:
		case <-w.scanNow:
			timer.Stop()
		}
	}
}

// requestRescan asks the scanner to rescan r as soon as it can.
func (w *Watcher) requestRescan(r *root) {
	r.rescan.Store(true)
	select {
	case w.scanNow <- struct{}{}:
	default:
	}
}

// Rescan asks for a full rescan of every root as soon as the scanner can
// (the daemon calls it when its state store works again, so that files
// found while it failed are not left for the next periodic rescan).
func (w *Watcher) Rescan() {
	for _, r := range w.roots {
		w.requestRescan(r)
	}
}

// scanState collects what one walk learnt.
type scanState struct {
	ctx      context.Context // of the scan loop; nil: the walk is not throttled
	tryWatch bool            // add inotify watches for folders that lack one
	dirs     map[string]bool // folders seen (full scans only)
	files    int
	limitHit bool // an Add failed with an inotify limit
	// light: files of watched folders that the tracker has as done, under
	// the inode number it saw, are taken as unchanged without a stat.
	light bool
}

// fullScanEvery bounds the time between full scans of a notify root: the
// rescans between them are light (scanState.light).
const fullScanEvery = time.Hour

// scanRoot walks all of r: feeds every candidate to the tracker, adds
// missing watches, forgets watches and emitted files that are gone, and
// sets r's next scan time and health. It waits while the tracker holds
// maxScanPending files (tracker.throttle).
func (w *Watcher) scanRoot(ctx context.Context, r *root) {
	start := time.Now()
	notify := w.fsw != nil && !w.notifyDead.Load() && !r.poll
	st := &scanState{ctx: ctx, dirs: make(map[string]bool)}
	// In fallback, only full rescans (not every poll) try to watch again:
	// each failing Add is a wasted syscall and a log line.
	if notify && (!r.fallback.Load() || w.rescanEvery == 0 || start.Sub(r.lastWatchTry) >= w.rescanEvery) {
		st.tryWatch = true
		r.lastWatchTry = start
	}
	st.light = notify && !r.fallback.Load() && !r.needFull && !r.lastFull.IsZero() && start.Sub(r.lastFull) < fullScanEvery
	r.resolve()
	scanNo := r.scanNo.Add(1)

	err := w.walk(r, r.path, st)
	if err != nil {
		if r.healthy.Swap(false) || r.nextScan.IsZero() {
			w.log.Error().Err(err).Str("root", r.Path).Msg("watch root is missing or unreadable; retrying")
		}
		w.obs.WatchError("root")
		msg := err.Error()
		r.scanErr.Store(&msg)
		r.nextScan = start.Add(min(r.pollEvery, maxRetry))
		return
	}
	r.scanErr.Store(nil)
	r.scanned.Store(time.Now().UnixNano())
	if !st.light {
		r.lastFull, r.needFull = start, false
	}
	if !r.healthy.Swap(true) && !r.nextScan.IsZero() {
		w.log.Info().Str("root", r.Path).Msg("watch root is available again")
	}

	w.tr.prune(r, scanNo)
	if notify {
		w.pruneWatches(r, st.dirs)
		if st.tryWatch && !st.limitHit && r.fallback.Load() {
			w.leaveFallback(r)
		}
	}

	switch {
	case r.poll || r.fallback.Load():
		r.nextScan = start.Add(r.pollEvery)
	case w.rescanEvery > 0:
		r.nextScan = start.Add(w.rescanEvery)
	default:
		r.nextScan = start.Add(100 * 365 * 24 * time.Hour)
	}
	w.log.Debug().Str("root", r.Path).Bool("light", st.light).Int("files", st.files).Int("dirs", len(st.dirs)).
		Float64("took_s", time.Since(start).Seconds()).Msg("scan done")
}

// walk visits dir and (for recursive roots) its subfolders. A folder gets
// its watch before it is listed, so a file created between the two is seen
// by the listing or by an event, never by neither. Only an error on dir
// itself is returned; unreadable subfolders are logged and skipped.
func (w *Watcher) walk(r *root, dir string, st *scanState) error {
	// Through an os.Root on the watch root, and one per folder below it: a
	// subfolder swapped for a link to somewhere else while the walk runs is
	// not listed, no stat follows a link out of the root, and a file's stat
	// is one fstatat in its folder. The root itself may be a link, unless
	// it lies in another watch root (trustfs.FS.OpenRoot).
	rt, err := r.fs.OpenRoot(r.path)
	if err != nil {
		return err
	}
	defer rt.Close()
	if dir == r.path {
		return w.walkDir(r, rt, dir, st, true)
	}
	rel, err := filepath.Rel(r.path, dir)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("%s is not inside the watch root %s", dir, r.path)
	}
	sub, err := rt.OpenRoot(rel)
	if err != nil {
		return err
	}
	defer sub.Close()
	return w.walkDir(r, sub, dir, st, true)
}

// scanBatch bounds the looks a scan hands the tracker at once (a folder's
// candidates, in chunks), and a sixteenth of the pending bound does too.
const scanBatch = 256

// dirEntry is one name in a folder listing, with its type when the listing
// says it and its inode number (0 where it does not).
type dirEntry struct {
	name string
	typ  fileType
	ino  uint64
}

type fileType uint8

const (
	typeUnknown fileType = iota
	typeDir
	typeOther // a regular file, link, FIFO, socket or device
)

// walkDir is walk in the folder dir, open as d.
func (w *Watcher) walkDir(r *root, d *os.Root, dir string, st *scanState, top bool) error {
	f := w.load(r, w.newFolder(r, d, dir, st), top)
	defer f.closeListing()
	w.visit(r, f, st)
	return f.err
}

// visit hands the tracker the looks of f, a folder load read, in listing
// order, and walks its subfolders in turn, reading some of them ahead
// (lookahead).
func (w *Watcher) visit(r *root, f *folder, st *scanState) {
	if st.dirs != nil {
		st.dirs[f.dir] = true
	}
	st.limitHit = st.limitHit || f.limitHit
	st.files += f.files
	var subs []int // f.ents' index of the subfolders to walk
	for i, e := range f.ents {
		if e.typ == typeDir && r.Recursive && !r.skipsDir(e.name) && !w.otherRoot(filepath.Join(f.dir, e.name), r) {
			subs = append(subs, i)
		}
	}
	ahead := newLookahead(w, r, f, subs, st)
	batch := min(scanBatch, max(w.tr.maxPending/16, 1))
	looks := make([]look, 0, min(batch, len(f.want))) // observed together (tracker.observeAll), in listing order
	flush := func() {
		if len(looks) == 0 {
			return
		}
		w.tr.observeAll(r, looks)
		looks = looks[:0]
		if st.ctx != nil && !w.tr.throttle(st.ctx) {
			st.ctx = nil // gave up waiting: the rest of the scan is not throttled
		}
	}
	hand := func(before int) {
		for l := range f.looksBefore(r, before) {
			if looks = append(looks, l); len(looks) >= batch {
				flush()
			}
		}
		flush()
	}
	for _, i := range subs {
		hand(i)
		if sub := ahead.next(); sub.d != nil {
			w.visit(r, sub, st)
			sub.closeListing()
			sub.d.Close()
		}
	}
	hand(len(f.ents))
}

// listDir opens and lists the folder d: its subfolders, its entries of
// unknown type and the files r wants by name, sorted by name. A folder
// that cannot be read is an error at the top of a walk and a log line
// below it. The listing's descriptor is returned open (nil if it failed).
func (w *Watcher) listDir(r *root, d *os.Root, dir string, top bool) (*dirFile, []dirEntry, error) {
	df, err := openDir(d)
	var ents []dirEntry
	if err == nil {
		ents, err = df.readDir(func(e dirEntry) bool { return e.typ != typeOther || r.wants(e.name) })
	}
	if err != nil {
		if top {
			return df, nil, err
		}
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn().Err(err).Str("path", state.Shown(dir)).Msg("cannot read folder; skipping it")
		}
	}
	slices.SortFunc(ents, func(a, b dirEntry) int { return strings.Compare(a.name, b.name) })
	return df, ents, nil
}

// watching reports whether dir has an inotify watch.
func (w *Watcher) watching(dir string) bool {
	w.dirMu.Lock()
	defer w.dirMu.Unlock()
	_, ok := w.dirs[dir]
	return ok
}

// watchDir adds an inotify watch on dir unless it has one. Running out of
// watches switches r to polling (with a log line naming the sysctl).
func (w *Watcher) watchDir(r *root, dir string) (limitHit bool) {
	w.dirMu.Lock()
	_, ok := w.dirs[dir]
	w.dirMu.Unlock()
	if ok {
		return false
	}
	err := w.addWatch(dir)
	switch {
	case err == nil:
		w.dirMu.Lock()
		w.dirs[dir] = r
		w.dirMu.Unlock()
	case errors.Is(err, syscall.ENOSPC):
		w.fallBack(r, "watch_limit", err)
		return true
	case errors.Is(err, syscall.EMFILE):
		w.fallBack(r, "instance_limit", err)
		return true
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		// Removed or replaced since the listing: nothing to watch.
	default:
		w.obs.WatchError("add")
		w.log.Warn().Err(err).Str("path", state.Shown(dir)).Msg("cannot watch folder; the periodic rescan still covers it")
	}
	return false
}

// pruneWatches drops watches on r's folders that the scan did not find and
// that are gone; events for their removal may have been lost to an overflow.
func (w *Watcher) pruneWatches(r *root, seen map[string]bool) {
	var stale []string
	w.dirMu.Lock()
	for p, owner := range w.dirs {
		if owner == r && !seen[p] {
			stale = append(stale, p)
		}
	}
	w.dirMu.Unlock()
	for _, p := range stale {
		if fi, err := r.lstat(p); err == nil && fi.IsDir() {
			continue // created after the walk passed by
		}
		w.unwatch(p)
	}
}
