package trustfs

import (
	"path/filepath"
	"slices"
	"sync/atomic"
)

// FS is the trust boundary over the watch folders: every access under one
// goes through its methods, and a watch folder inside another is opened
// through the outermost one holding it. The zero FS (or nil) knows no watch
// folders and traces nothing; SetFolders may run while others use it.
type FS struct {
	// Trace, set before the FS is shared, sees each durable step (see Note).
	Trace   func(op, path string)
	folders atomic.Pointer[[]string]
}

// SetFolders names the watch folders (absolute paths), replacing the last
// list: the watcher calls it with its roots, at start and at each reload.
func (t *FS) SetFolders(paths []string) {
	clean := make([]string, len(paths))
	for i, p := range paths {
		clean[i] = filepath.Clean(p)
	}
	t.folders.Store(&clean)
}

// Folders returns the watch folders last named by SetFolders.
func (t *FS) Folders() []string { return slices.Clone(t.list()) }

// list is Folders, shared: callers do not modify it.
func (t *FS) list() []string {
	if t == nil {
		return nil
	}
	if l := t.folders.Load(); l != nil {
		return *l
	}
	return nil
}

// RootOf returns the innermost watch folder that holds path, or is path
// ("" if none): the root to reach path through.
func (t *FS) RootOf(path string) string {
	best := ""
	for _, w := range t.list() {
		if _, in := Within(w, path); in && len(w) > len(best) {
			best = w
		}
	}
	return best
}

// outerOf returns the outermost watch folder that holds root ("" if none).
func (t *FS) outerOf(root string) string {
	outer := ""
	for _, w := range t.list() {
		if rel, in := Within(w, root); in && rel != "." && (outer == "" || len(w) < len(outer)) {
			outer = w
		}
	}
	return outer
}
