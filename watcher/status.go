package watcher

import (
	"slices"
	"strings"
	"time"
)

// Settling is a file the watcher has seen and waits on until it has been
// quiet for settle.
type Settling struct {
	Path, Root string
	Size       int64
	// Since is when it was first seen; Changed its latest modification.
	Since, Changed time.Time
}

// Settling lists the files waiting to settle, the longest waiting first.
func (w *Watcher) Settling() []Settling {
	w.tr.mu.Lock()
	out := make([]Settling, 0, len(w.tr.pending))
	for _, e := range w.tr.pending {
		out = append(out, Settling{Path: e.path, Root: e.r.Root.Path, Size: e.st.size, Since: e.since, Changed: e.mtime})
	}
	w.tr.mu.Unlock()
	slices.SortFunc(out, func(a, b Settling) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out
}

// RootState is how the scans of one watch root go.
type RootState struct {
	Path string
	// LastScan is when its latest scan ended well; zero before one did.
	LastScan time.Time
	// Error is why its latest scan failed ("" when it did not).
	Error string
	// Polling: it is polled, by configuration or as inotify's fallback.
	Polling bool
}

// RootStates returns the state of every root, the innermost first.
func (w *Watcher) RootStates() []RootState {
	w.rootsMu.RLock()
	defer w.rootsMu.RUnlock()
	out := make([]RootState, 0, len(w.roots))
	for _, r := range w.roots {
		s := RootState{Path: r.Path, Polling: r.poll || r.fallback.Load()}
		if ns := r.scanned.Load(); ns != 0 {
			s.LastScan = time.Unix(0, ns)
		}
		if e := r.scanErr.Load(); e != nil {
			s.Error = *e
		}
		out = append(out, s)
	}
	return out
}
