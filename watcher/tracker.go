package watcher

import (
	"container/heap"
	"context"
	"errors"
	"hash/maphash"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
)

// stamp is one look at a file: what "unchanged" compares.
type stamp struct {
	size  int64
	mtime int64 // UnixNano
}

func stampOf(fi fs.FileInfo) stamp {
	return stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}

// entry is a file waiting to settle. st is the latest look; due is when the
// next look is taken: settle after the latest event or change.
type entry struct {
	path  string
	r     *root
	st    stamp
	mtime time.Time
	due   time.Time
	since time.Time // when it was first seen
	idx   int       // position in the heap, -1 while out of it
	gen   uint64    // bumped by every event, so a look taken meanwhile is stale
}

// doneEntry remembers a file version already emitted (or Known), so that
// rescans skip it; seen is the root's scan number that last found it, ino
// the inode number of its look. The tracker keys it by the path's hash
// (tracker.key): a folder of 100,000 files then costs about 5 MB, and a
// collision could only skip a file whose other path has the same size and
// mtime to the nanosecond (or, in a light scan, the same inode). It holds
// no pointer (root is the root's id), so the collector does not scan the
// table.
type doneEntry struct {
	st   stamp
	ino  uint64
	seen uint32
	root uint32
}

func inoOf(fi fs.FileInfo) uint64 { return trustfs.IDOf(fi).Ino }

// tracker decides when files are finished. All pending files share one
// timer: events only move an entry within a min-heap of due times, so a
// copy producing thousands of Write events costs thousands of O(log n) heap
// fixes and no timer resets or goroutines. Nothing is persisted.
type tracker struct {
	settle time.Duration
	known  func(string, int64, time.Time) bool
	// knownBatch is Options.KnownBatch (nil: scans ask known per file).
	knownBatch func([]Candidate) []bool
	obs        Observer
	log        zerolog.Logger

	mu      sync.Mutex
	pending map[string]*entry
	queue   entryHeap
	done    map[uint64]doneEntry
	seed    maphash.Seed // of done's keys
	// handedBack holds the look of each emitted file the daemon handed
	// back (Watcher.Forget: its store refused it), until it is emitted
	// again: the same look emitted again is no new discovery.
	handedBack map[string]stamp
	armed      time.Time                            // when the scheduler wakes next; zero while idle
	wake       chan struct{}                        // tells the scheduler an earlier due time exists
	maxPending int                                  // the pending files a scan waits at (throttle)
	drained    chan struct{}                        // tells a waiting scan that files left pending
	after      func(time.Duration) <-chan time.Time // time.After; a test's clock
}

func newTracker(settle time.Duration, known func(string, int64, time.Time) bool, obs Observer) *tracker {
	return &tracker{
		settle:     settle,
		known:      known,
		obs:        obs,
		pending:    make(map[string]*entry),
		done:       make(map[uint64]doneEntry),
		seed:       maphash.MakeSeed(),
		handedBack: make(map[string]stamp),
		wake:       make(chan struct{}, 1),
		maxPending: maxScanPending,
		drained:    make(chan struct{}, 1),
		after:      time.After,
	}
}

// observe records a look at a candidate file. fromEvent means fsnotify
// reported activity: the quiet period restarts even when the look shows no
// change yet (the write may not be visible in the size and mtime).
func (t *tracker) observe(r *root, path string, fi fs.FileInfo, fromEvent bool) {
	st := stampOf(fi)
	now := time.Now()
	t.mu.Lock()
	if e := t.pending[path]; e != nil {
		t.update(e, st, fi.ModTime(), fromEvent, now)
		t.mu.Unlock()
		return
	}
	key := t.key(path)
	if d, ok := t.done[key]; ok && d.st == st {
		d.seen, d.ino = r.scanNo.Load(), inoOf(fi)
		t.done[key] = d
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()

	// Known may read a database: call it without the lock.
	if t.known != nil && t.known(path, st.size, fi.ModTime()) {
		t.mu.Lock()
		if t.pending[path] == nil {
			t.done[key] = doneEntry{st: st, root: r.id, seen: r.scanNo.Load(), ino: inoOf(fi)}
		}
		t.mu.Unlock()
		return
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.pending[path]; e != nil { // another goroutine got here first
		t.update(e, st, fi.ModTime(), fromEvent, now)
		return
	}
	e := &entry{path: path, r: r, st: st, mtime: fi.ModTime(), since: now, idx: -1}
	t.pending[path] = e
	t.schedule(e, now.Add(t.settle))
}

// look is a scan's stat of one candidate file.
type look struct {
	path string
	fi   fs.FileInfo
}

// observeAll is observe, not from an event, of a scan's looks: the files
// the tracker holds no look of are asked of knownBatch in one call.
func (t *tracker) observeAll(r *root, looks []look) {
	if t.knownBatch == nil {
		for _, l := range looks {
			t.observe(r, l.path, l.fi, false)
		}
		return
	}
	ask := make([]Candidate, 0, len(looks))
	inos := make([]uint64, 0, len(looks)) // of ask's looks
	t.mu.Lock()
	for _, l := range looks {
		st := stampOf(l.fi)
		if e := t.pending[l.path]; e != nil {
			t.update(e, st, l.fi.ModTime(), false, time.Now())
			continue
		}
		key := t.key(l.path)
		if d, ok := t.done[key]; ok && d.st == st {
			d.seen, d.ino = r.scanNo.Load(), inoOf(l.fi)
			t.done[key] = d
			continue
		}
		ask = append(ask, Candidate{Path: l.path, Root: r.Root.Path, Size: st.size, ModTime: l.fi.ModTime()})
		inos = append(inos, inoOf(l.fi))
	}
	t.mu.Unlock()
	if len(ask) == 0 {
		return
	}
	known := t.knownBatch(ask) // may read a database: without the lock
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, c := range ask {
		st := stamp{size: c.Size, mtime: c.ModTime.UnixNano()}
		e := t.pending[c.Path]
		switch {
		case i < len(known) && known[i]:
			if e == nil {
				t.done[t.key(c.Path)] = doneEntry{st: st, root: r.id, seen: r.scanNo.Load(), ino: inos[i]}
			}
		case e != nil: // an event got here first
			t.update(e, st, c.ModTime, false, time.Now())
		default:
			now := time.Now()
			e = &entry{path: c.Path, r: r, st: st, mtime: c.ModTime, since: now, idx: -1}
			t.pending[c.Path] = e
			t.schedule(e, now.Add(t.settle))
		}
	}
}

// update is observe for a file already pending; t.mu is held.
func (t *tracker) update(e *entry, st stamp, mtime time.Time, fromEvent bool, now time.Time) {
	if e.st == st && !fromEvent {
		return // a scan saw the same look: the quiet period goes on
	}
	e.st, e.mtime = st, mtime
	e.gen++
	t.schedule(e, now.Add(t.settle))
}

// schedule sets e's due time; t.mu is held.
func (t *tracker) schedule(e *entry, due time.Time) {
	e.due = due
	if e.idx < 0 {
		heap.Push(&t.queue, e)
	} else {
		heap.Fix(&t.queue, e.idx)
	}
	if t.armed.IsZero() || due.Before(t.armed) {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

// reset forgets every pending and emitted file, between two sessions of
// the watcher (SetRoots): their roots are gone.
func (t *tracker) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending = make(map[string]*entry)
	t.queue = nil
	t.done = make(map[uint64]doneEntry)
	t.handedBack = make(map[string]stamp)
	t.armed = time.Time{}
}

// forget drops a removed or renamed-away file, so that a file appearing
// later under the same name is judged afresh.
func (t *tracker) forget(path string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.pending[path]; e != nil {
		if e.idx >= 0 {
			heap.Remove(&t.queue, e.idx)
		}
		delete(t.pending, path)
		t.left()
	}
	delete(t.done, t.key(path))
	delete(t.handedBack, path)
}

// handBack forgets an emitted file the daemon could not record, as forget
// does, but remembers its look: emitted again unchanged, it is not counted
// as discovered again (splatd_files_discovered_total counts each version of
// a file once, however many rescans a full state disk makes).
func (t *tracker) handBack(path string) {
	t.mu.Lock()
	d, ok := t.done[t.key(path)]
	t.mu.Unlock()
	t.forget(path)
	if ok {
		t.mu.Lock()
		t.handedBack[path] = d.st
		t.mu.Unlock()
	}
}

// key is path's key in t.done.
func (t *tracker) key(path string) uint64 { return maphash.String(t.seed, path) }

// keyIn is key of the file name in the folder dir, without building the path.
func (t *tracker) keyIn(dir, name string) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	h.WriteString(dir)
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		h.WriteByte(filepath.Separator)
	}
	h.WriteString(name)
	return h.Sum64()
}

// seenUnchanged marks the file name in dir seen by r's scan when the
// tracker has it as done under inode ino and not pending, and reports
// whether it did.
func (t *tracker) seenUnchanged(r *root, dir, name string, ino uint64) bool {
	if ino == 0 {
		return false
	}
	key := t.keyIn(dir, name)
	t.mu.Lock()
	defer t.mu.Unlock()
	d, ok := t.done[key]
	if !ok || d.root != r.id || d.ino != ino {
		return false
	}
	if len(t.pending) > 0 && t.pending[filepath.Join(dir, name)] != nil {
		return false
	}
	d.seen = r.scanNo.Load()
	t.done[key] = d
	return true
}

// touchSidecar re-arms the settle timer of the splat a sidecar belongs to,
// so a splat is not emitted between its copy and its sidecar's.
func (t *tracker) touchSidecar(sidecar string) {
	stem := strings.TrimSuffix(sidecar, sidecarSuffix)
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, ext := range []string{".ply", ".sog", ".spz", ".PLY", ".SOG", ".SPZ", ".compressed.ply"} {
		if e := t.pending[stem+ext]; e != nil {
			e.gen++
			t.schedule(e, now.Add(t.settle))
		}
	}
}

// prune forgets emitted files of r that the scan numbered scanNo did not
// see (moved away after upload, deleted, or in a folder the scan could not
// read: such a file is asked of Known again when a scan sees it).
func (t *tracker) prune(r *root, scanNo uint32) {
	var back []string // few: only while the daemon's store refuses files
	t.mu.Lock()
	for k, d := range t.done {
		if d.root == r.id && d.seen != scanNo {
			delete(t.done, k)
		}
	}
	for p := range t.handedBack {
		back = append(back, p)
	}
	t.mu.Unlock()
	for _, p := range back {
		if !within(r.path, p) {
			continue // another root's prune looks at it
		}
		if _, err := r.lstat(p); errors.Is(err, fs.ErrNotExist) {
			t.mu.Lock()
			delete(t.handedBack, p)
			t.mu.Unlock()
		}
	}
}

// run is the scheduler: it sleeps until the earliest due time, takes the
// second look at that file and emits it if nothing changed.
func (t *tracker) run(ctx context.Context, out chan<- Candidate) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		now := time.Now()
		var e *entry
		var gen uint64
		t.mu.Lock()
		switch {
		case len(t.queue) == 0:
			t.armed = time.Time{}
		case t.queue[0].due.After(now):
			t.armed = t.queue[0].due
		default:
			e = heap.Pop(&t.queue).(*entry)
			gen = e.gen
			t.armed = now // no wake-ups while checking: the loop looks again after
		}
		armed := t.armed
		t.mu.Unlock()

		if e != nil {
			if !t.check(ctx, e, gen, out) {
				return
			}
			continue
		}
		var fire <-chan time.Time
		if !armed.IsZero() {
			timer.Reset(armed.Sub(now))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-fire:
		case <-t.wake:
			timer.Stop()
		}
	}
}

// check takes the second look at a due file and emits it when the look
// matches the first. It returns false when ctx ended while sending.
func (t *tracker) check(ctx context.Context, e *entry, gen uint64, out chan<- Candidate) bool {
	fi, ok := e.r.candidateInfo(e.path, nil) // outside the lock: stat may be slow on NFS
	t.mu.Lock()
	if t.pending[e.path] != e || e.gen != gen {
		t.mu.Unlock() // forgotten, or re-armed by an event during the stat
		return true
	}
	if !ok {
		delete(t.pending, e.path) // gone, or no longer a regular file
		t.left()
		t.mu.Unlock()
		return true
	}
	if st := stampOf(fi); st != e.st {
		e.st, e.mtime = st, fi.ModTime()
		e.gen++
		t.schedule(e, time.Now().Add(t.settle))
		t.mu.Unlock()
		return true
	}
	if ripe := e.mtime.Add(e.r.MinAge); e.r.MinAge > 0 && time.Now().Before(ripe) {
		// Too young: kept pending and looked at again when old enough (an
		// event or a changed look re-arms it as usual meanwhile).
		t.schedule(e, ripe)
		t.mu.Unlock()
		return true
	}
	delete(t.pending, e.path)
	t.left()
	t.done[t.key(e.path)] = doneEntry{st: e.st, root: e.r.id, seen: e.r.scanNo.Load(), ino: inoOf(fi)}
	st, back := t.handedBack[e.path]
	again := back && st == e.st
	delete(t.handedBack, e.path)
	t.mu.Unlock()

	if size := e.st.size; e.r.outside(e.path, size) != "" {
		// Remembered as done, so that rescans do not log it again; a change
		// of the file makes it a new version, judged afresh.
		t.log.Info().Str("path", state.Shown(e.path)).Int64("size", size).Int64("min_size", e.r.MinSize).
			Int64("max_size", e.r.MaxSize).Msg("file outside the folder's size bounds; skipped")
		return true
	}

	c := Candidate{Path: e.path, Root: e.r.Root.Path, Size: e.st.size, ModTime: e.mtime}
	select {
	case out <- c:
		if !again {
			t.obs.FileDiscovered()
		}
		return true
	case <-ctx.Done():
		return false
	}
}

// entryHeap orders pending files by due time.
type entryHeap []*entry

func (h entryHeap) Len() int           { return len(h) }
func (h entryHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h entryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
