package watcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// deadline bounds every wait. It is generous on purpose: the tests assert
// what is emitted, never how fast (speed is in the benchmarks).
const deadline = 30 * time.Second

// fakeObserver records Observer calls.
type fakeObserver struct {
	mu         sync.Mutex
	discovered int
	errs       []string
	fallback   []bool
}

func (o *fakeObserver) FileDiscovered() { o.mu.Lock(); o.discovered++; o.mu.Unlock() }
func (o *fakeObserver) WatchError(kind string) {
	o.mu.Lock()
	o.errs = append(o.errs, kind)
	o.mu.Unlock()
}
func (o *fakeObserver) PollingFallback(active bool) {
	o.mu.Lock()
	o.fallback = append(o.fallback, active)
	o.mu.Unlock()
}

func (o *fakeObserver) hasError(kind string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.errs, kind)
}

// harness runs a Watcher for one test.
type harness struct {
	t   *testing.T
	w   *Watcher
	out chan Candidate
	dir string
}

// start builds a Watcher over one root (dir = t.TempDir() unless r.Path is
// set), lets setup adjust it, runs it and waits for its startup scan.
func start(t *testing.T, o Options, r Root, setup func(*Watcher)) *harness {
	t.Helper()
	if r.Path == "" {
		r.Path = t.TempDir()
	}
	o.Roots = []Root{r}
	if o.Settle == 0 {
		o.Settle = 200 * time.Millisecond
	}
	if testing.Verbose() {
		o.Logger = zerolog.New(zerolog.NewTestWriter(t))
	}
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(w)
	}
	h := &harness{t: t, w: w, out: make(chan Candidate, 16), dir: r.Path}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx, h.out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	h.eventually("startup scan", w.Healthy)
	return h
}

// eventually polls cond until it holds or the deadline passes.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			h.t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// next returns the next Candidate.
func (h *harness) next() Candidate {
	h.t.Helper()
	select {
	case c := <-h.out:
		return c
	case <-time.After(deadline):
		h.t.Fatal("no candidate emitted")
		return Candidate{}
	}
}

// until collects candidates until one for path arrives, returning all of
// them (path's last). A sentinel file written after the files under test
// makes "nothing else was emitted" checkable without sleeping: the watcher
// handles events in order and settles each for the same time.
func (h *harness) until(path string) []Candidate {
	h.t.Helper()
	var got []Candidate
	for {
		c := h.next()
		got = append(got, c)
		if c.Path == path {
			return got
		}
	}
}

func (h *harness) path(rel string) string { return filepath.Join(h.dir, rel) }

func (h *harness) write(rel, data string) string {
	h.t.Helper()
	p := h.path(rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return p
}

// sentinel writes a fresh candidate file and returns everything emitted up
// to and including it, sentinel excluded.
func (h *harness) sentinel() []Candidate {
	h.t.Helper()
	p := h.write(fmt.Sprintf("zz-sentinel-%d.ply", time.Now().UnixNano()), "s")
	got := h.until(p)
	return got[:len(got)-1]
}

func paths(cs []Candidate) []string {
	var ps []string
	for _, c := range cs {
		ps = append(ps, c.Path)
	}
	return ps
}

// TestSlowWriterEmittedOnceAfterItStops: a file that keeps growing is
// emitted with its final size once its writer stops. A loaded machine may
// stall the writer for longer than settle, and then the watcher is right to
// emit the file as it was; so the test does not assume the writer is never
// late, it checks each earlier emission against the writer's own clock: a
// partial candidate must follow a pause of at least settle in the writes.
func TestSlowWriterEmittedOnceAfterItStops(t *testing.T) {
	t.Parallel()
	const settle = 500 * time.Millisecond
	h := start(t, Options{Settle: settle}, Root{Recursive: true}, nil)
	p := h.path("slow.ply")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	type write struct {
		size       int64
		start, end time.Time
	}
	var writes []write
	var size int64
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		w := write{start: time.Now()}
		n, err := f.Write(chunk)
		if err != nil {
			t.Fatal(err)
		}
		size += int64(n)
		w.size, w.end = size, time.Now()
		writes = append(writes, w)
		time.Sleep(20 * time.Millisecond)
	}
	f.Close()
	fi, _ := os.Stat(p)

	var c Candidate
	for c = h.next(); c.Path == p && c.Size != size; c = h.next() {
		// A partial emission: the writes must have paused for settle right
		// after the write that made this size.
		k := slices.IndexFunc(writes, func(w write) bool { return w.size == c.Size })
		if k < 0 || k+1 >= len(writes) || writes[k+1].end.Sub(writes[k].start) < settle {
			t.Fatalf("emitted %s with %d of %d bytes while it was still being written", c.Path, c.Size, size)
		}
		t.Logf("the writer paused for %v after %d bytes: that size was rightly emitted", writes[k+1].end.Sub(writes[k].start), c.Size)
	}
	if c.Path != p || c.Size != size || !c.ModTime.Equal(fi.ModTime()) || c.Root != h.dir {
		t.Fatalf("got %+v, want %s with %d bytes, mtime %v", c, p, size, fi.ModTime())
	}
	if extra := h.sentinel(); len(extra) != 0 {
		t.Fatalf("emitted again: %v", paths(extra))
	}
}

func TestTempNameThenRename(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	tmp := h.write("scan.ply.part", "partial data")
	for i := 0; i < 5; i++ {
		f, _ := os.OpenFile(tmp, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString(" more")
		f.Close()
	}
	final := h.path("scan.ply")
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	got := h.until(final)
	if len(got) != 1 {
		t.Fatalf("emitted %v, want only %s", paths(got), final)
	}
	if got[0].Size != int64(len("partial data")+5*len(" more")) {
		t.Errorf("size %d", got[0].Size)
	}
	if extra := h.sentinel(); len(extra) != 0 {
		t.Fatalf("emitted again: %v", paths(extra))
	}
}

// TestNestedFoldersCreatedWithFile is `mkdir -p a/b/c && write` repeated:
// the file lands before the watch on c exists, so only "watch, then list"
// finds it.
func TestNestedFoldersCreatedWithFile(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	const n = 60
	want := make(map[string]bool)
	for i := 0; i < n; i++ {
		want[h.write(fmt.Sprintf("run%d/a/b/c/splat.ply", i), "x")] = true
	}
	for len(want) > 0 {
		c := h.next()
		if !want[c.Path] {
			t.Fatalf("unexpected or repeated candidate %s", c.Path)
		}
		delete(want, c.Path)
	}
	if extra := h.sentinel(); len(extra) != 0 {
		t.Fatalf("emitted again: %v", paths(extra))
	}
}

func TestBurstEmittedExactlyOnce(t *testing.T) {
	t.Parallel()
	obs := &fakeObserver{}
	h := start(t, Options{Observer: obs}, Root{Recursive: true}, nil)
	const n = 2000
	want := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		want[h.write(fmt.Sprintf("d%d/f%04d.ply", i%10, i), "data")] = true
	}
	for len(want) > 0 {
		c := h.next()
		if !want[c.Path] {
			t.Fatalf("unexpected or repeated candidate %s", c.Path)
		}
		delete(want, c.Path)
	}
	if extra := h.sentinel(); len(extra) != 0 {
		t.Fatalf("emitted again: %v", paths(extra))
	}
	// The sentinel's FileDiscovered may be reported just after the
	// sentinel itself is received: wait for it (bounded), then check that
	// nothing was counted twice.
	discovered := func() int {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.discovered
	}
	for deadline := time.Now().Add(10 * time.Second); discovered() < n+1 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if got := discovered(); got != n+1 {
		t.Errorf("FileDiscovered called %d times, want %d", got, n+1)
	}
}

// TestOverflowRescan loses every event, as a kernel queue overflow does,
// and checks that the rescan ErrEventOverflow triggers finds the file.
func TestOverflowRescan(t *testing.T) {
	t.Parallel()
	obs := &fakeObserver{}
	h := start(t, Options{Observer: obs, RescanInterval: time.Hour}, Root{Recursive: true}, nil)
	h.w.dropEvents.Store(true)
	p := h.write("lost/event.ply", "x")
	h.w.inject <- fsnotify.ErrEventOverflow
	if c := h.next(); c.Path != p {
		t.Fatalf("got %s, want %s", c.Path, p)
	}
	if !obs.hasError("overflow") {
		t.Errorf("WatchError(overflow) not reported: %v", obs.errs)
	}
	// The rescan also watched the folder the lost event created.
	h.w.dropEvents.Store(false)
	q := h.write("lost/second.ply", "y")
	if got := h.until(q); len(got) != 1 {
		t.Fatalf("emitted %v", paths(got))
	}
}

func TestPollMode(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true, Mode: ModePoll, PollInterval: 100 * time.Millisecond}, nil)
	if h.w.fsw != nil {
		t.Fatal("poll mode opened an inotify instance")
	}
	p := h.write("deep/er/polled.ply", "one")
	c := h.next()
	if c.Path != p || c.Size != 3 {
		t.Fatalf("got %+v", c)
	}
	// A file that changes after it was emitted is emitted again.
	h.write("deep/er/polled.ply", "one two")
	if c := h.next(); c.Path != p || c.Size != 7 {
		t.Fatalf("after change got %+v", c)
	}
	if extra := h.sentinel(); len(extra) != 0 {
		t.Fatalf("emitted again: %v", paths(extra))
	}
}

func TestChangedFileEmittedAgain(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	p := h.write("a.ply", "v1")
	if c := h.next(); c.Path != p || c.Size != 2 {
		t.Fatalf("got %+v", c)
	}
	h.write("a.ply", "version 2")
	if c := h.next(); c.Path != p || c.Size != 9 {
		t.Fatalf("got %+v", c)
	}
}

func TestSymlinks(t *testing.T) {
	t.Parallel()
	outside := filepath.Join(t.TempDir(), "outside.ply")
	os.WriteFile(outside, []byte("outside"), 0o644)

	t.Run("ignored by default", func(t *testing.T) {
		t.Parallel()
		h := start(t, Options{}, Root{Recursive: true}, nil)
		real := h.write("sub/real.ply", "real")
		if got := h.until(real); len(got) != 1 {
			t.Fatalf("emitted %v", paths(got))
		}
		os.Symlink(real, h.path("link.ply"))
		os.Symlink(filepath.Join(h.dir, "sub"), h.path("linkdir"))
		if extra := h.sentinel(); len(extra) != 0 {
			t.Fatalf("symlinks emitted: %v", paths(extra))
		}
	})
	t.Run("followed inside the root only", func(t *testing.T) {
		t.Parallel()
		h := start(t, Options{}, Root{Recursive: true, FollowSymlinks: true}, nil)
		real := h.write("sub/real.ply", "real")
		h.until(real)
		link := h.path("link.ply")
		os.Symlink(real, link)
		os.Symlink(outside, h.path("escape.ply"))
		os.Symlink("../"+filepath.Base(filepath.Dir(outside))+"/outside.ply", h.path("relescape.ply"))
		got := h.sentinel()
		if len(got) != 1 || got[0].Path != link || got[0].Size != 4 {
			t.Fatalf("got %v, want only %s (4 bytes)", got, link)
		}
	})
}

func TestIncludeExclude(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	for _, name := range []string{".hidden.ply", "scan.tmp", "scan.ply.part", "scan.ply~", ".cache/inner.ply",
		"x.tmp/inner.ply", "notes.txt", "scan.ply.tmp"} {
		h.write(name, "x")
	}
	upper := h.write("UPPER.PLY", "x")
	sog := h.write("b.sog", "x")
	got := paths(h.sentinel())
	slices.Sort(got)
	want := []string{upper, sog}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("emitted %v, want %v", got, want)
	}

	t.Run("custom", func(t *testing.T) {
		t.Parallel()
		h := start(t, Options{}, Root{Include: []string{"*.sog", "zz-*"}, Exclude: []string{"draft-*"}}, nil)
		h.write("a.ply", "x")
		h.write("draft-b.sog", "x")
		h.write("sub/c.sog", "x") // not recursive
		keep := h.write("d.sog", "x")
		if got := h.sentinel(); len(got) != 1 || got[0].Path != keep {
			t.Fatalf("emitted %v, want only %s", paths(got), keep)
		}
	})
}

// writeQueued writes n files old00.ply… in dir and returns their paths as
// a queue that knows them.
func writeQueued(dir string, n int) map[string]bool {
	queued := make(map[string]bool)
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("old%02d.ply", i))
		os.WriteFile(p, []byte("done"), 0o644)
		queued[p] = true
	}
	return queued
}

func TestKnownSkipsQueuedFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queued := writeQueued(dir, 50)
	var mu sync.Mutex
	calls := 0
	known := func(path string, size int64, mtime time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		if queued[path] { // not the sentinels, which an event and a rescan may both ask about
			calls++
		}
		fi, err := os.Stat(path)
		return queued[path] && err == nil && fi.Size() == size && fi.ModTime().Equal(mtime)
	}
	h := start(t, Options{Known: known}, Root{Path: dir, Recursive: true}, nil)
	if got := h.sentinel(); len(got) != 0 {
		t.Fatalf("known files emitted: %v", paths(got))
	}
	// Rescans do not ask again about files already known.
	mu.Lock()
	before := calls
	mu.Unlock()
	h.w.requestRescan(h.w.roots[0])
	h.sentinel()
	mu.Lock()
	defer mu.Unlock()
	if calls-before != 0 {
		t.Errorf("rescan asked Known about %d queued files, want none", calls-before)
	}
}

// TestKnownBatchAsksOncePerFolder: a scan asks KnownBatch about a
// folder's files together, skips those known and emits the others.
func TestKnownBatchAsksOncePerFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	queued := writeQueued(dir, 50)
	fresh := filepath.Join(dir, "new.ply")
	os.WriteFile(fresh, []byte("new"), 0o644)
	var mu sync.Mutex
	calls, asked := 0, 0
	batch := func(files []Candidate) []bool {
		mu.Lock()
		defer mu.Unlock()
		known := make([]bool, len(files))
		old := 0
		for i, c := range files {
			if queued[c.Path] {
				old++
			}
			fi, err := os.Stat(c.Path)
			known[i] = queued[c.Path] && err == nil && fi.Size() == c.Size && fi.ModTime().Equal(c.ModTime) && c.Root == dir
		}
		if old > 0 {
			calls++
			asked += old
		}
		return known
	}
	h := start(t, Options{KnownBatch: batch}, Root{Path: dir, Recursive: true}, nil)
	if got := h.sentinel(); len(got) != 1 || got[0].Path != fresh {
		t.Fatalf("emitted %v, want only %s", paths(got), fresh)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 || asked != 50 {
		t.Errorf("the startup scan asked KnownBatch about the 50 known files %d times (%d files), want once", calls, asked)
	}
}

// TestForgetReemitsAtRescan: a file the daemon could not record (full
// disk) is emitted again by the next rescan once forgotten, and not before.
func TestForgetReemitsAtRescan(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Path: t.TempDir(), Recursive: true}, nil)
	p := h.write("scan.ply", "ply")
	if got := h.until(p); got[len(got)-1].Path != p {
		t.Fatalf("first emission: %v", paths(got))
	}
	h.w.requestRescan(h.w.roots[0])
	if got := h.sentinel(); len(got) != 0 {
		t.Fatalf("rescan re-emitted a remembered file: %v", paths(got))
	}
	h.w.Forget(p)
	h.w.requestRescan(h.w.roots[0])
	if got := h.until(p); got[len(got)-1].Path != p {
		t.Fatalf("forgotten file not emitted again: %v", paths(got))
	}
}

// TestForgetCountsAFileOnce: a file the daemon hands back (its store
// refused it: a full disk) and that a rescan emits again unchanged is no
// new discovery; a new version of it is.
func TestForgetCountsAFileOnce(t *testing.T) {
	t.Parallel()
	obs := &fakeObserver{}
	h := start(t, Options{Observer: obs}, Root{Path: t.TempDir(), Recursive: true}, nil)
	discovered := func() int { obs.mu.Lock(); defer obs.mu.Unlock(); return obs.discovered }
	p := h.write("full.ply", "ply")
	h.until(p)
	h.eventually("the first discovery", func() bool { return discovered() == 1 })
	for range 3 { // three rescans while the store refuses the file
		h.w.Forget(p)
		h.w.Rescan()
		h.until(p)
	}
	if got := h.sentinel(); len(got) != 0 {
		t.Fatalf("unexpected emissions: %v", paths(got))
	}
	// The sentinel's count may come just after the sentinel itself.
	h.eventually("the sentinel counted", func() bool { return discovered() >= 2 })
	if n := discovered(); n != 2 { // the file, and the sentinel
		t.Errorf("FileDiscovered called %d times, want 2 (the file once, the sentinel)", n)
	}
	h.w.Forget(p)
	h.write("full.ply", "ply, longer") // a new version meanwhile
	h.w.Rescan()
	h.until(p)
	h.eventually("the new version discovered", func() bool { return discovered() >= 3 })
	if n := discovered(); n != 3 {
		t.Errorf("FileDiscovered called %d times, want 3 (the new version once more)", n)
	}
}

// TestWatchLimitFallsBackToPolling makes every folder below the root fail
// to be watched with ENOSPC, as when fs.inotify.max_user_watches is reached.
func TestWatchLimitFallsBackToPolling(t *testing.T) {
	t.Parallel()
	obs := &fakeObserver{}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sub"), 0o755)
	h := start(t, Options{Observer: obs}, Root{Path: dir, Recursive: true, PollInterval: 100 * time.Millisecond},
		func(w *Watcher) {
			w.addWatch = func(p string) error {
				if p != dir {
					return syscall.ENOSPC
				}
				return w.fsw.Add(p)
			}
		})
	p := h.write("sub/deep/found-by-polling.ply", "x")
	if c := h.next(); c.Path != p {
		t.Fatalf("got %s", c.Path)
	}
	if !obs.hasError("watch_limit") {
		t.Errorf("WatchError(watch_limit) not reported: %v", obs.errs)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if !slices.Equal(obs.fallback, []bool{true}) {
		t.Errorf("PollingFallback calls %v, want [true]", obs.fallback)
	}
	if !h.w.Healthy() {
		t.Error("not healthy while polling")
	}
}

func TestInstanceLimitFallsBackToPolling(t *testing.T) {
	t.Parallel()
	obs := &fakeObserver{}
	h := start(t, Options{Observer: obs}, Root{Recursive: true, PollInterval: 100 * time.Millisecond},
		func(w *Watcher) {
			w.newNotify = func() (*fsnotify.Watcher, error) { return nil, syscall.EMFILE }
		})
	p := h.write("a/b.ply", "x")
	if c := h.next(); c.Path != p {
		t.Fatalf("got %s", c.Path)
	}
	if !obs.hasError("instance_limit") {
		t.Errorf("WatchError(instance_limit) not reported: %v", obs.errs)
	}
}

// TestRenamedFolderDropsWatches moves a watched folder out of the tree and
// another into it.
func TestRenamedFolderDropsWatches(t *testing.T) {
	t.Parallel()
	h := start(t, Options{}, Root{Recursive: true}, nil)
	first := h.write("move/me/a.ply", "x")
	h.until(first)
	watched := func(p string) func() bool {
		return func() bool { h.w.dirMu.Lock(); defer h.w.dirMu.Unlock(); _, ok := h.w.dirs[p]; return ok }
	}
	h.eventually("watch on move/me", watched(h.path("move/me")))

	away := filepath.Join(t.TempDir(), "away")
	if err := os.Rename(h.path("move"), away); err != nil {
		t.Fatal(err)
	}
	h.eventually("watches dropped", func() bool { return !watched(h.path("move"))() && !watched(h.path("move/me"))() })
	os.WriteFile(filepath.Join(away, "me", "outside-now.ply"), []byte("x"), 0o644)

	incoming := filepath.Join(t.TempDir(), "incoming")
	os.MkdirAll(filepath.Join(incoming, "x"), 0o755)
	os.WriteFile(filepath.Join(incoming, "x", "in.ply"), []byte("x"), 0o644)
	if err := os.Rename(incoming, h.path("incoming")); err != nil {
		t.Fatal(err)
	}
	in := h.path("incoming/x/in.ply")
	if got := h.until(in); len(got) != 1 {
		t.Fatalf("emitted %v, want only %s", paths(got), in)
	}
	later := h.write("incoming/x/later.ply", "x")
	if got := h.until(later); len(got) != 1 {
		t.Fatalf("emitted %v", paths(got))
	}
}

func TestSidecarRearmsSettle(t *testing.T) {
	t.Parallel()
	h := start(t, Options{Settle: 300 * time.Millisecond}, Root{Recursive: true}, nil)
	p := h.write("s.ply", "splat")
	h.write("s.splat.yaml", "title: x")
	if c := h.next(); c.Path != p {
		t.Fatalf("got %s", c.Path)
	}
}

func TestRunStopsWhileBlockedOnOut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.ply"), []byte("x"), 0o644)
	w, err := New(Options{Roots: []Root{{Path: dir}}, Settle: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx, make(chan Candidate)) }() // nobody reads
	// Wait until a.ply has settled: the scheduler is then blocked on out.
	h := &harness{t: t, w: w}
	h.eventually("a.ply settled", func() bool {
		w.tr.mu.Lock()
		defer w.tr.mu.Unlock()
		return len(w.tr.done) == 1
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(deadline):
		t.Fatal("Run did not return after cancel")
	}
	if w.Healthy() {
		t.Error("healthy after Run returned")
	}
	if err := w.Run(context.Background(), nil); err == nil {
		t.Error("second Run accepted")
	}
}

func TestMissingRootRecovers(t *testing.T) {
	t.Parallel()
	obs := &fakeObserver{}
	dir := filepath.Join(t.TempDir(), "later")
	w, err := New(Options{Roots: []Root{{Path: dir, Recursive: true, PollInterval: 100 * time.Millisecond}},
		Settle: 100 * time.Millisecond, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan Candidate, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx, out)
	h := &harness{t: t, w: w, out: out, dir: dir}
	h.eventually("root error reported", func() bool { return obs.hasError("root") })
	if w.Healthy() {
		t.Fatal("healthy without its root")
	}
	p := h.write("f.ply", "x")
	if c := h.next(); c.Path != p {
		t.Fatalf("got %s", c.Path)
	}
	h.eventually("healthy", w.Healthy)
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]Options{
		"no roots":    {},
		"empty path":  {Roots: []Root{{}}},
		"bad mode":    {Roots: []Root{{Path: "/x", Mode: "inotify"}}},
		"bad pattern": {Roots: []Root{{Path: "/x", Include: []string{"[.ply"}}}},
		"path glob":   {Roots: []Root{{Path: "/x", Exclude: []string{"a/*.ply"}}}},
		"duplicate":   {Roots: []Root{{Path: "/x"}, {Path: "/x/"}}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRescanReemitsForgottenFiles: Rescan (the daemon's "the state store
// works again") rescans every root at once, so forgotten files come back
// without waiting for the periodic rescan (off here).
func TestRescanReemitsForgottenFiles(t *testing.T) {
	t.Parallel()
	h := start(t, Options{RescanInterval: -1}, Root{Path: t.TempDir(), Recursive: true}, nil)
	pa := h.write("scan.ply", "ply")
	if got := h.until(pa); got[len(got)-1].Path != pa {
		t.Fatalf("first emission: %v", paths(got))
	}
	h.w.Forget(pa)
	h.w.Rescan()
	if got := h.until(pa); got[len(got)-1].Path != pa {
		t.Fatalf("forgotten file not emitted again after Rescan: %v", paths(got))
	}
}

// TestScanWaitsForPendingToDrain: a startup scan of more files than the
// tracker's bound emits each once, and never leaves more than the bound
// (and the one file it just saw) pending.
func TestScanWaitsForPendingToDrain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const n, bound = 300, 16
	want := make(map[string]bool, n)
	for i := 0; i < n; i++ {
		p := filepath.Join(dir, fmt.Sprintf("d%d", i%3), fmt.Sprintf("f%04d.ply", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		want[p] = true
	}
	var peak atomic.Int64
	w, err := New(Options{Roots: []Root{{Path: dir, Recursive: true}}, Settle: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	w.tr.maxPending = bound
	w.tr.obs = pendingProbe{w.tr, &peak}
	// Read from the start: the harness's start waits for the scan, which
	// waits for candidates to be read.
	h := &harness{t: t, w: w, out: make(chan Candidate), dir: dir}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx, h.out) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	for len(want) > 0 {
		c := h.next()
		if !want[c.Path] {
			t.Fatalf("unexpected or repeated candidate %s", c.Path)
		}
		delete(want, c.Path)
	}
	if got := peak.Load(); got > bound+1 {
		t.Errorf("%d files pending at once, want at most %d", got, bound+1)
	}
	if extra := h.sentinel(); len(extra) != 0 {
		t.Fatalf("emitted again: %v", paths(extra))
	}
}

// pendingProbe records the most files pending when one is discovered.
type pendingProbe struct {
	tr   *tracker
	peak *atomic.Int64
}

func (p pendingProbe) FileDiscovered() {
	p.tr.mu.Lock()
	n := int64(len(p.tr.pending))
	p.tr.mu.Unlock()
	for {
		old := p.peak.Load()
		if n <= old || p.peak.CompareAndSwap(old, n) {
			return
		}
	}
}
func (pendingProbe) WatchError(string)    {}
func (pendingProbe) PollingFallback(bool) {}

// TestLightRescan loses every event after a file is emitted: a periodic
// rescan finds a file replaced by a rename (a new inode) but takes the
// unchanged inode of a file rewritten in place as unchanged without a
// stat; the full rescan an overflow asks for finds that one.
func TestLightRescan(t *testing.T) {
	t.Parallel()
	h := start(t, Options{RescanInterval: 20 * time.Millisecond}, Root{Recursive: true}, nil)
	a, c := h.write("d/a.ply", "one"), h.write("d/c.ply", "one")
	h.until(c)
	h.w.dropEvents.Store(true)
	tmp := h.write("d/a.ply.tmp", "one two")
	if err := os.Rename(tmp, a); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c, []byte("one two three"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := h.sentinel()
	if len(got) != 1 || got[0].Path != a || got[0].Size != 7 {
		t.Fatalf("light rescans emitted %+v, want only the replaced %s", got, a)
	}
	h.w.inject <- fsnotify.ErrEventOverflow
	if got := h.next(); got.Path != c || got.Size != 13 {
		t.Fatalf("the full rescan emitted %+v, want %s rewritten in place", got, c)
	}
}

// TestKeyIn: a file's key from its folder and name is the key of its path.
func TestKeyIn(t *testing.T) {
	tr := newTracker(time.Second, nil, nil)
	for _, c := range [][2]string{{"/", "a.ply"}, {"/w", "a.ply"}, {"/w/deep/er", "ß ü.ply"}} {
		if got, want := tr.keyIn(c[0], c[1]), tr.key(filepath.Join(c[0], c[1])); got != want {
			t.Errorf("keyIn(%q, %q) = %x, want %x", c[0], c[1], got, want)
		}
	}
}

// TestPruneOwnRoot: a root's scan forgets only its own files it did not
// see; another root's stay done.
func TestPruneOwnRoot(t *testing.T) {
	a, err := newRoot(Root{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := newRoot(Root{Path: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker(time.Second, nil, nil)
	pa, pb := filepath.Join(a.path, "x.ply"), filepath.Join(b.path, "x.ply")
	tr.done[tr.key(pa)] = doneEntry{root: a.id, seen: 1, ino: 7}
	tr.done[tr.key(pb)] = doneEntry{root: b.id, seen: 1, ino: 8}
	tr.prune(a, 2)
	if _, ok := tr.done[tr.key(pa)]; ok {
		t.Error("a's file unseen by a's scan 2 is still done")
	}
	if _, ok := tr.done[tr.key(pb)]; !ok {
		t.Error("b's file was forgotten by a's scan")
	}
	if !tr.seenUnchanged(b, b.path, "x.ply", 8) || tr.seenUnchanged(a, b.path, "x.ply", 8) {
		t.Error("seenUnchanged does not hold b's file to b")
	}
}
