package watcher

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"github.com/fsnotify/fsnotify"
	"github.com/splatd/splatd/state"
)

// sysctl advice for each inotify limit, in the log line an operator reads.
var limitSysctl = map[string]string{
	"watch_limit":    "fs.inotify.max_user_watches",
	"instance_limit": "fs.inotify.max_user_instances",
}

// eventLoop turns fsnotify events into tracker looks and watch changes.
// A run of Write events for one file that arrive back to back is handled
// as one (one stat), which is what a large copy produces.
func (w *Watcher) eventLoop(ctx context.Context) {
	events, errs := w.fsw.Events, w.fsw.Errors
	var held *fsnotify.Event // a Write waiting to see if more writes to the same file follow
	for {
		var ev fsnotify.Event
		var ok bool
		if held != nil {
			select {
			case ev, ok = <-events:
			default:
				w.handle(*held)
				held = nil
				continue
			}
		} else {
			select {
			case <-ctx.Done():
				return
			case ev, ok = <-events:
			case err, eok := <-errs:
				if !eok {
					errs = nil
					continue
				}
				w.notifyError(err)
				continue
			case err := <-w.inject:
				w.notifyError(err)
				continue
			}
		}
		if !ok {
			if held != nil {
				w.handle(*held)
			}
			if ctx.Err() == nil {
				w.notifyDead.Store(true)
				w.fallBackAll("notify", errors.New("fsnotify event channel closed"))
			}
			return
		}
		if w.dropEvents.Load() {
			continue
		}
		if held != nil {
			if ev.Op == fsnotify.Write && ev.Name == held.Name {
				continue
			}
			w.handle(*held)
			held = nil
		}
		if ev.Op == fsnotify.Write {
			held = &ev
			continue
		}
		w.handle(ev)
	}
}

// handle applies one event.
func (w *Watcher) handle(ev fsnotify.Event) {
	r := w.rootOf(ev.Name)
	if r == nil || r.poll {
		return
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		// A renamed folder keeps its inotify watch under the old name: drop
		// it and everything below; the new name arrives as a Create.
		w.unwatchTree(ev.Name)
		w.tr.forget(ev.Name)
		if ev.Name == r.path {
			w.requestRescan(r) // the root itself went away: retry until it is back
		}
		if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Write) {
			return
		}
	}
	if !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Chmod) {
		return
	}
	name := filepath.Base(ev.Name)
	if strings.HasSuffix(name, sidecarSuffix) {
		w.tr.touchSidecar(ev.Name)
		if w.onSettings != nil {
			w.onSettings(ev.Name)
		}
		return
	}
	if !ev.Has(fsnotify.Create) && !r.wants(name) {
		return // only a Create can be a folder; skip the stat
	}
	fi, err := r.lstat(ev.Name)
	if err != nil {
		return // already gone (its Remove event follows), or out of the root
	}
	if fi.IsDir() {
		if ev.Has(fsnotify.Create) && ev.Name != r.path && r.Recursive &&
			!r.skipsDir(name) && !w.otherRoot(ev.Name, r) && within(r.path, filepath.Dir(ev.Name)) {
			// New (or renamed-in) folder: watch it first, then list it, so
			// files created with it (mkdir -p a/b/c && write) are not missed.
			w.walk(r, ev.Name, &scanState{tryWatch: !r.fallback.Load()})
		}
		return
	}
	if !r.wants(name) {
		return
	}
	if fi, ok := r.candidateInfo(ev.Name, fi); ok {
		w.tr.observe(r, ev.Name, fi, true)
	}
}

// notifyError handles an error from fsnotify. Events may have been lost,
// so every notify root is rescanned at once.
func (w *Watcher) notifyError(err error) {
	kind := "notify"
	if errors.Is(err, fsnotify.ErrEventOverflow) {
		kind = "overflow"
		w.log.Warn().Msg("inotify event queue overflowed; rescanning (raise fs.inotify.max_queued_events if this repeats)")
	} else {
		w.log.Warn().Err(err).Msg("fsnotify error; rescanning")
	}
	w.obs.WatchError(kind)
	for _, r := range w.roots {
		if !r.poll {
			w.requestRescan(r)
		}
	}
}

// unwatchTree removes the watches of dir and every folder below it.
func (w *Watcher) unwatchTree(dir string) {
	w.dirMu.Lock()
	if _, ok := w.dirs[dir]; !ok {
		w.dirMu.Unlock()
		return // not a watched folder (a file, usually): nothing below it is watched
	}
	var gone []string
	for p := range w.dirs {
		if within(dir, p) {
			gone = append(gone, p)
		}
	}
	w.dirMu.Unlock()
	for _, p := range gone {
		w.unwatch(p)
	}
}

// unwatch removes one folder's watch. fsnotify already forgot folders that
// were deleted, so "non-existent watch" is expected and ignored.
func (w *Watcher) unwatch(dir string) {
	w.dirMu.Lock()
	delete(w.dirs, dir)
	w.dirMu.Unlock()
	if err := w.fsw.Remove(dir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) {
		w.log.Debug().Err(err).Str("path", state.Shown(dir)).Msg("removing watch")
	}
}

// fallBack switches a notify root to polling after inotify ran out of
// watches or instances, telling the operator which sysctl to raise.
func (w *Watcher) fallBack(r *root, kind string, err error) {
	if !r.fallback.CompareAndSwap(false, true) {
		return
	}
	if sysctl, ok := limitSysctl[kind]; ok {
		w.log.Error().Err(err).Str("root", r.Path).Str("sysctl", sysctl).Float64("poll_interval_s", r.pollEvery.Seconds()).
			Msgf("inotify limit reached: polling this root instead; raise %s (e.g. sysctl -w %s=524288, persist it in /etc/sysctl.d/)", sysctl, sysctl)
	} else {
		w.log.Error().Err(err).Str("root", r.Path).Float64("poll_interval_s", r.pollEvery.Seconds()).
			Msg("file notifications stopped: polling this root instead until splatd restarts")
	}
	w.obs.WatchError(kind)
	w.dirMu.Lock()
	w.nFallen++
	first := w.nFallen == 1
	w.dirMu.Unlock()
	if first {
		w.obs.PollingFallback(true)
	}
	w.requestRescan(r)
}

// leaveFallback returns r to event-driven watching once a rescan managed to
// watch all its folders (the operator raised the limit, or watches freed).
func (w *Watcher) leaveFallback(r *root) {
	if !r.fallback.CompareAndSwap(true, false) {
		return
	}
	w.log.Info().Str("root", r.Path).Msg("inotify watches available again; polling stopped")
	w.dirMu.Lock()
	w.nFallen--
	last := w.nFallen == 0
	w.dirMu.Unlock()
	if last {
		w.obs.PollingFallback(false)
	}
}

// fallBackAll puts every notify root into polling: fsnotify could not start
// (instance limit) or stopped. Only a restart tries inotify again.
func (w *Watcher) fallBackAll(kind string, err error) {
	for _, r := range w.roots {
		if !r.poll {
			w.fallBack(r, kind, err)
		}
	}
}
