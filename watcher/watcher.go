// Package watcher turns activity in watched folders into one "this file is
// finished" Candidate per file version: fsnotify on every folder (with
// polling where notifications never come), a full scan at start, periodic
// and on-demand rescans, include/exclude filters, and a settle timer that
// waits until a file has been quiet, with unchanged size and mtime across
// two looks.
//
// It keeps no state on disk: a restart rescans everything and relies on
// Options.Known (the queue) to skip files already taken. It never talks to
// the store or the API.
package watcher

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"

	"github.com/splatd/splatd/watcher/trustfs"
)

// Watch modes of a Root.
const (
	ModeNotify = "notify" // inotify events plus periodic rescans (the default)
	ModePoll   = "poll"   // scans every PollInterval: NFS, SMB, FUSE, where no events come
)

// Defaults used when the corresponding Options or Root field is zero.
const (
	DefaultSettle         = 5 * time.Second
	DefaultRescanInterval = 5 * time.Minute
	DefaultPollInterval   = 10 * time.Second
)

// DefaultInclude and DefaultExclude are the base-name patterns a Root uses
// when its Include or Exclude is nil. The includes are every format the
// service takes: PLY (plain and compressed), bundled SOG, SPZ, and the
// meta.json of an unbundled SOG folder (published as one bundle). The excludes are the temporary names
// capture and copy tools write under before renaming into place.
var (
	DefaultInclude = []string{"*.ply", "*.sog", "*.spz", "meta.json"}
	DefaultExclude = []string{".*", "*.tmp", "*.part", "*~"}
)

// sidecarSuffix names the per-file settings that travel with a splat;
// writing one re-arms the settle timer of its splat so that both are
// picked up together.
const sidecarSuffix = ".splat.yaml"

// folderHandle is the base name of an unbundled SOG folder's meta.json, the
// folder's handle: what is published is the bundle built from the folder,
// so MinSize and MaxSize bound that bundle, which the consumer sizes (the
// worker pool, before it builds it), and not meta.json's own few kilobytes.
const folderHandle = "meta.json"

// Root is one watched folder.
type Root struct {
	Path string
	// Recursive watches and scans every subfolder. The configuration's
	// default is true; the zero value watches the top folder only.
	Recursive bool
	// Include and Exclude are filepath.Match patterns on the base name,
	// matched case-insensitively (capture rigs write X.PLY as often as
	// x.ply). A file is a candidate if it matches an Include pattern and no
	// Exclude pattern; folders matching an Exclude pattern are not entered.
	// nil means DefaultInclude / DefaultExclude; an empty non-nil Exclude
	// excludes nothing.
	Include, Exclude []string
	// Mode is ModeNotify ("" means notify) or ModePoll.
	Mode string
	// PollInterval is the scan period in poll mode, and also while a notify
	// root has fallen back to polling because inotify ran out of watches.
	// Zero means DefaultPollInterval.
	PollInterval time.Duration
	// FollowSymlinks makes a symlink to a regular file a candidate, provided
	// its target resolves inside the watch root. Symlinked folders are never
	// entered (they could loop or leave the root).
	FollowSymlinks bool
	// MinSize and MaxSize bound a candidate's size in bytes (0: no bound).
	// A settled file outside them is skipped with one log line per version
	// of the file; it becomes a candidate if it changes into the bounds.
	// An unbundled SOG folder's meta.json is not held to them: they bound
	// its bundle (folderHandle).
	MinSize, MaxSize int64
	// MinAge holds back a settled file whose mtime is younger than this:
	// it is looked at again once old enough, not forgotten (0: off).
	MinAge time.Duration
}

// Candidate is a file that has been quiet for the settle time. Path is
// absolute and lies under the (absolute) root path; Root is the Root.Path
// as configured, so the caller can find the root's settings.
type Candidate struct {
	Path, Root string
	Size       int64
	ModTime    time.Time
}

// Observer receives the watcher's measurements; the metrics package
// implements it. Calls come from the watcher's goroutines, so
// implementations must be safe for concurrent use and must not block.
// A nil Observer in Options records nothing.
type Observer interface {
	// FileDiscovered is called once per Candidate delivered on out, except
	// for one the daemon handed back (Forget) and that is delivered again
	// unchanged: each version of a file is counted once.
	FileDiscovered()
	// WatchError counts one problem with watching. kind is one of
	// "overflow" (the kernel event queue overflowed: rescanning),
	// "watch_limit" (fs.inotify.max_user_watches reached),
	// "instance_limit" (fs.inotify.max_user_instances reached),
	// "notify" (another fsnotify error), "add" (a folder could not be
	// watched) or "root" (a watch root is missing or unreadable).
	WatchError(kind string)
	// PollingFallback reports whether any notify root is currently polling
	// because inotify ran out of watches or instances. It is called on each
	// change, true when the first root falls back, false when the last one
	// is watched again.
	PollingFallback(active bool)
}

type nopObserver struct{}

func (nopObserver) FileDiscovered()      {}
func (nopObserver) WatchError(string)    {}
func (nopObserver) PollingFallback(bool) {}

// Options configure a Watcher.
type Options struct {
	Roots []Root
	// Settle is how long a file must stay unchanged (no events, same size
	// and mtime) before it is a Candidate. Zero means DefaultSettle.
	Settle time.Duration
	// RescanInterval is the period of full rescans of notify roots, which
	// catch anything events missed. Zero means DefaultRescanInterval; a
	// negative value disables periodic rescans (overflow rescans remain).
	RescanInterval time.Duration
	Logger         zerolog.Logger
	// Known, if set, reports whether a file with this size and mtime is
	// already queued; such a file is not emitted, so a restart over 10,000
	// processed files emits nothing. It is called from the watcher's
	// goroutines (concurrently) and should be fast.
	Known func(path string, size int64, mtime time.Time) bool
	// KnownBatch, if set, is Known for several files at once (known[i]
	// for files[i]): scans ask it once per folder instead of Known once per
	// file. Events still ask Known.
	KnownBatch func(files []Candidate) (known []bool)
	// OnSettings, if set, is called with the path of a per-file sidecar or
	// a folder's settings file (*.splat.yaml) that a notify root saw
	// created or written: jobs that failed on it may be tried again. It
	// must not block.
	OnSettings func(path string)
	Observer   Observer
	// FS is the trust boundary every access under a root goes through; the
	// watcher names its roots to it (SetFolders) at New and at each
	// SetRoots. Nil: an FS of the watcher's own.
	FS *trustfs.FS
}

// Watcher finds finished files under its roots. Create it with New and
// start it with Run.
type Watcher struct {
	log   zerolog.Logger
	obs   Observer
	roots []*root // longest path first, so rootOf finds the innermost root; see rootsMu
	// rootsMu guards roots against SetRoots: a session's goroutines read
	// roots without it (SetRoots swaps them only between sessions); Healthy,
	// Rediscover and SetRoots take it.
	rootsMu     sync.RWMutex
	running     bool         // Run has started; under rootsMu
	reroot      chan []*root // new roots for Run to take between sessions
	rescanEvery time.Duration
	tr          *tracker
	onSettings  func(path string) // Options.OnSettings; nil: none
	fs          *trustfs.FS       // Options.FS

	started atomic.Bool
	alive   atomic.Bool

	fsw        *fsnotify.Watcher
	notifyDead atomic.Bool // fsnotify stopped unexpectedly: all roots poll
	dirMu      sync.Mutex
	dirs       map[string]*root // folders with an inotify watch
	nFallen    int              // roots polling in fallback; under dirMu

	scanNow chan struct{} // wakes the scanner for roots with rescan set

	// Test hooks: replace inotify calls, and lose or inject events.
	newNotify  func() (*fsnotify.Watcher, error)
	addWatch   func(path string) error
	ownAdd     bool // addWatch is the session's fsw.Add, not a test's
	dropEvents atomic.Bool
	inject     chan error
}

// New checks o and returns a Watcher. It touches no files: roots that are
// missing are reported (and retried) by Run, because a mount may come later.
func New(o Options) (*Watcher, error) {
	if len(o.Roots) == 0 {
		return nil, errors.New("watcher: no roots")
	}
	w := &Watcher{
		log:         o.Logger,
		obs:         o.Observer,
		rescanEvery: o.RescanInterval,
		dirs:        make(map[string]*root),
		scanNow:     make(chan struct{}, 1),
		inject:      make(chan error, 1),
		reroot:      make(chan []*root, 1),
		newNotify:   fsnotify.NewWatcher,
		onSettings:  o.OnSettings,
		fs:          o.FS,
	}
	if w.fs == nil {
		w.fs = new(trustfs.FS)
	}
	if w.obs == nil {
		w.obs = nopObserver{}
	}
	switch {
	case w.rescanEvery == 0:
		w.rescanEvery = DefaultRescanInterval
	case w.rescanEvery < 0:
		w.rescanEvery = 0
	}
	settle := o.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	roots, err := buildRoots(o.Roots, w.fs)
	if err != nil {
		return nil, err
	}
	w.fs.SetFolders(rootPaths(roots)) // a root inside another is opened through it
	w.roots = roots
	w.tr = newTracker(settle, o.Known, w.obs)
	w.tr.knownBatch = o.KnownBatch
	w.tr.log = o.Logger
	return w, nil
}

// SetRoots replaces the watched roots, for a config reload. A running
// watcher ends its session (watches, scanner, settle timers) and starts a
// new one over the new roots with a startup scan: files already taken are
// skipped through Options.Known, files that were settling are found again.
// Invalid roots are refused and the old ones stay.
func (w *Watcher) SetRoots(cfgs []Root) error {
	roots, err := buildRoots(cfgs, w.fs)
	if err != nil {
		return err
	}
	w.fs.SetFolders(rootPaths(roots))
	w.rootsMu.Lock()
	defer w.rootsMu.Unlock()
	if !w.running {
		w.roots = roots
		return nil
	}
	select { // the latest roots win over ones Run has not taken yet
	case <-w.reroot:
	default:
	}
	w.reroot <- roots
	return nil
}

// Rediscover forgets what the watcher remembers of path and rescans its
// root soon, so that a file the store has forgotten (splatd forget) is
// reported again without waiting for the periodic rescan.
func (w *Watcher) Rediscover(path string) {
	w.tr.forget(path)
	w.rootsMu.RLock()
	r := w.rootOf(path)
	w.rootsMu.RUnlock()
	if r != nil {
		w.requestRescan(r)
	}
}

// Run watches until ctx is done, sending each finished file on out, and
// returns nil then. It blocks on out while the consumer is busy (events are
// still tracked meanwhile) but never past ctx. A Candidate lost to
// cancellation is found again by the next run's startup scan. SetRoots
// ends one session and starts the next over the new roots.
func (w *Watcher) Run(ctx context.Context, out chan<- Candidate) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("watcher: Run called twice")
	}
	w.rootsMu.Lock()
	w.running = true
	w.rootsMu.Unlock()
	for {
		sess, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); w.session(sess, out) }()
		select {
		case <-ctx.Done():
			stop()
			<-done
			return nil
		case roots := <-w.reroot:
			stop()
			<-done
			w.newSession(roots)
		}
	}
}

// newSession installs roots between two sessions: nothing of the last one
// runs, so its watches, fallbacks and remembered files can be reset.
func (w *Watcher) newSession(roots []*root) {
	w.rootsMu.Lock()
	w.roots = roots
	w.rootsMu.Unlock()
	w.dirMu.Lock()
	w.dirs = make(map[string]*root)
	fallen := w.nFallen > 0
	w.nFallen = 0
	w.dirMu.Unlock()
	if fallen {
		w.obs.PollingFallback(false)
	}
	w.notifyDead.Store(false)
	w.fsw = nil
	w.tr.reset()
	w.log.Info().Int("roots", len(roots)).Msg("watch folders changed; scanning them")
}

// session runs one watching session over w.roots until ctx ends.
func (w *Watcher) session(ctx context.Context, out chan<- Candidate) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	if slices.ContainsFunc(w.roots, func(r *root) bool { return !r.poll }) {
		fsw, err := w.newNotify()
		if err != nil {
			w.fallBackAll("instance_limit", err)
		} else {
			w.fsw = fsw
			if w.addWatch == nil || w.ownAdd {
				w.addWatch, w.ownAdd = fsw.Add, true
			}
		}
	}

	var wg sync.WaitGroup
	if w.fsw != nil {
		wg.Go(func() { w.eventLoop(ctx) })
	}
	wg.Go(func() { w.scanLoop(ctx) })
	wg.Go(func() { w.tr.run(ctx, out) })
	w.alive.Store(true)

	<-ctx.Done()
	w.alive.Store(false)
	// Closing fsnotify ends its reader; the event loop returns on ctx.
	if w.fsw != nil {
		if err := w.fsw.Close(); err != nil {
			w.log.Warn().Err(err).Msg("closing fsnotify")
		}
	}
	wg.Wait()
}

// Healthy reports whether Run is running and every root was scanned
// successfully the last time (a notify root polling in fallback counts as
// healthy: files are still found). It is false until the startup scan of
// every root has finished.
func (w *Watcher) Healthy() bool {
	if !w.alive.Load() {
		return false
	}
	w.rootsMu.RLock()
	defer w.rootsMu.RUnlock()
	for _, r := range w.roots {
		if !r.healthy.Load() {
			return false
		}
	}
	return true
}

// rootOf returns the innermost root containing p, or nil.
func (w *Watcher) rootOf(p string) *root {
	for _, r := range w.roots {
		if within(r.path, p) {
			return r
		}
	}
	return nil
}

// otherRoot reports whether dir is the path of a root other than r: nested
// roots are walked and watched by themselves, with their own settings.
func (w *Watcher) otherRoot(dir string, r *root) bool {
	for _, o := range w.roots {
		if o != r && o.path == dir {
			return true
		}
	}
	return false
}

// Forget drops what the watcher remembers of path, so that the next event
// or rescan that sees it emits it again. The daemon calls it when it could
// not record an emitted file (a full disk, say): without it the file would
// wait for the next restart. Emitted again unchanged, the file is not
// counted as discovered again (Observer.FileDiscovered).
func (w *Watcher) Forget(path string) { w.tr.handBack(path) }
