package watcher

import (
	"errors"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/splatd/splatd/state"
)

// folder is one folder as load read it: its listing, the files in it that
// the scan looks at, and its looks at the first statAhead of them.
type folder struct {
	d        *os.Root // nil: it could not be opened
	df       *dirFile // its listing's descriptor; nil: none, or closed once every stat was done
	dir      string
	ents     []dirEntry    // its listing, as listDir keeps it
	pre      []fs.FileInfo // by ents' index: the stat that told an unknown type; nil: none
	files    int           // entries the root's rules want by name
	want     []int         // ents' index of the wanted files to look at, in listing order
	ready    int           // want's entries stat'ed
	looks    []look        // the candidates among the last ones stat'ed
	lookAt   []int         // ents' index of each of looks
	next     int           // looks handed on
	err      error         // listing the top folder of a walk
	light    bool          // watched before a light scan: unchanged done files are not stat'ed
	limitHit bool          // its watch failed on an inotify limit
}

// maxAhead is how many folders a walk reads ahead of the one it visits;
// with statAhead, it bounds the stat results the walk holds.
const maxAhead = 8

// statAhead bounds the files load stats ahead of visit in one folder, and
// so the memory a folder read ahead holds.
const statAhead = 4096

// newFolder begins the load of the folder dir, open as d: it notes
// whether dir was watched before the scan, then gets dir its watch when the
// scan tries.
func (w *Watcher) newFolder(r *root, d *os.Root, dir string, st *scanState) *folder {
	f := &folder{d: d, dir: dir, light: st.light && w.watching(dir)}
	if st.tryWatch {
		f.limitHit = w.watchDir(r, dir)
	}
	return f
}

// openSub opens the subfolder name of d, at path p, and begins its load;
// its d is nil if it cannot be opened.
func (w *Watcher) openSub(r *root, d *os.Root, p, name string, st *scanState) *folder {
	sub, err := d.OpenRoot(name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn().Err(err).Str("path", state.Shown(p)).Msg("cannot read folder; skipping it")
		}
		return &folder{dir: p}
	}
	return w.newFolder(r, sub, p, st)
}

// load reads f, a folder newFolder began: it is listed, then its wanted
// files are stat'ed; a folder that could not be opened is left as it is.
// Only the listing and one fstatat per wanted file (or entry of unknown
// type) touch the disk; a light scan of a folder watched before it skips
// the fstatat of files the tracker has as done under the same inode. load
// may run ahead of the walk, on another goroutine: it changes no scan
// state.
func (w *Watcher) load(r *root, f *folder, top bool) *folder {
	if f.d == nil {
		return f
	}
	f.df, f.ents, f.err = w.listDir(r, f.d, f.dir, top)
	f.choose(r, w.tr)
	f.prepare(r, statAhead)
	if f.ready == len(f.want) {
		f.closeListing() // every stat is done: the close, which frees the kernel's listing, is off the walk
	}
	return f
}

// choose types the entries the listing left untyped, counts the files the
// rules want and picks those to stat: all of them, less (in a light scan)
// the ones tr has as done under the same inode.
func (f *folder) choose(r *root, tr *tracker) {
	f.typeUnknowns()
	for i, e := range f.ents {
		typed := f.pre != nil && f.pre[i] != nil // by typeUnknowns: listDir did not check its name
		if e.typ != typeOther || typed && !r.wants(e.name) {
			continue
		}
		f.files++
		if f.light && !typed && tr.seenUnchanged(r, f.dir, e.name, e.ino) {
			continue
		}
		f.want = append(f.want, i)
	}
}

// typeUnknowns stats the entries whose listing gave no type and sets it;
// one that vanished since the listing stays typeUnknown.
func (f *folder) typeUnknowns() {
	var at []int
	for i, e := range f.ents {
		if e.typ == typeUnknown {
			at = append(at, i)
		}
	}
	if len(at) == 0 || f.df == nil {
		return
	}
	infos := f.lstat(at)
	f.pre = make([]fs.FileInfo, len(f.ents))
	for k, i := range at {
		if fi := infos[k]; fi != nil {
			if f.ents[i].typ = typeOther; fi.IsDir() {
				f.ents[i].typ = typeDir
			}
			f.pre[i] = fi
		}
	}
}

// lstat is the lstat of the entries at (ents' indexes), nil where one
// vanished; an entry typeUnknowns stat'ed is not stat'ed again.
func (f *folder) lstat(at []int) []fs.FileInfo {
	infos := make([]fs.FileInfo, len(at))
	if f.df == nil {
		return infos
	}
	names := make([]string, len(at)) // "": typeUnknowns has its stat
	for k, i := range at {
		if f.pre == nil || f.pre[i] == nil {
			names[k] = f.ents[i].name
		}
	}
	f.df.lstat(names, infos)
	for k, i := range at {
		if f.pre != nil && f.pre[i] != nil {
			infos[k] = f.pre[i]
		}
	}
	return infos
}

// prepare stats the next n files of want and keeps the looks of the
// candidates among them: regular files, and links the root follows.
func (f *folder) prepare(r *root, n int) {
	chunk := f.want[f.ready:min(f.ready+n, len(f.want))]
	f.ready += len(chunk)
	f.looks, f.lookAt, f.next = slices.Grow(f.looks[:0], len(chunk)), slices.Grow(f.lookAt[:0], len(chunk)), 0
	for k, fi := range f.lstat(chunk) {
		if fi == nil {
			continue // vanished since the listing
		}
		i := chunk[k]
		p := childPath(f.dir, f.ents[i].name)
		if fi, ok := r.candidateInfo(p, fi); ok {
			f.looks, f.lookAt = append(f.looks, look{path: p, fi: fi}), append(f.lookAt, i)
		}
	}
}

// looksBefore yields, in listing order, the looks at the files listed
// before ents[limit]; it stats the rest of want in chunks of statAhead.
func (f *folder) looksBefore(r *root, limit int) iter.Seq[look] {
	return func(yield func(look) bool) {
		for {
			for ; f.next < len(f.looks) && f.lookAt[f.next] < limit; f.next++ {
				if !yield(f.looks[f.next]) {
					f.next++
					return
				}
			}
			if f.next < len(f.looks) || f.ready == len(f.want) || f.want[f.ready] >= limit {
				return
			}
			f.prepare(r, statAhead)
		}
	}
}

// closeListing closes the listing's descriptor.
func (f *folder) closeListing() {
	if f.df != nil {
		f.df.Close()
		f.df = nil
	}
}

// lookahead loads a folder's subfolders in order, up to maxAhead ahead of
// the one visited, on a few loader goroutines that take them in turn. A
// light scan stats almost nothing and reads none ahead.
type lookahead struct {
	w     *Watcher
	r     *root
	f     *folder
	subs  []int
	st    *scanState
	todo  chan loadJob   // for the loaders, in walk order
	ready []chan *folder // the started subfolders, in walk order
	n     int            // subfolders started
}

// loadJob is one subfolder for a loader: f.ents' index, and where its
// folder goes once loaded.
type loadJob struct {
	i  int
	ch chan *folder
}

// loaders is how many goroutines a lookahead loads on: as many as can run
// at once. More would let the newest folders take the processors from the
// oldest, which the walk waits for.
func loaders() int { return runtime.GOMAXPROCS(0) }

func newLookahead(w *Watcher, r *root, f *folder, subs []int, st *scanState) *lookahead {
	a := &lookahead{w: w, r: r, f: f, subs: subs, st: st}
	window := min(maxAhead, len(subs))
	if st.light || window == 0 {
		return a
	}
	a.todo = make(chan loadJob, window)
	for range min(window, loaders()) {
		go a.load()
	}
	for range window {
		a.start()
	}
	return a
}

// load is one loader: it opens each subfolder it takes, gets it its watch
// and loads it.
func (a *lookahead) load() {
	for j := range a.todo {
		j.ch <- a.loadSub(j.i)
		runtime.Gosched() // the walk, which may wait for this folder, runs first
	}
}

func (a *lookahead) loadSub(i int) *folder {
	name := a.f.ents[i].name
	return a.w.load(a.r, a.w.openSub(a.r, a.f.d, filepath.Join(a.f.dir, name), name, a.st), false)
}

// start hands the next subfolder to the loaders.
func (a *lookahead) start() {
	ch := make(chan *folder, 1)
	a.ready = append(a.ready, ch)
	a.todo <- loadJob{i: a.subs[a.n], ch: ch} // never blocks: todo holds the window
	if a.n++; a.n == len(a.subs) {
		close(a.todo)
	}
}

// next is the next subfolder, loaded; it starts the one after the window.
func (a *lookahead) next() *folder {
	if len(a.ready) == 0 { // no window
		a.n++
		return a.loadSub(a.subs[a.n-1])
	}
	ch := a.ready[0]
	a.ready = a.ready[1:]
	if a.n < len(a.subs) {
		a.start()
	}
	return <-ch
}

// childPath is filepath.Join(dir, name) for a clean dir and a name from
// its listing, which has no separator, without cleaning it again.
func childPath(dir, name string) string {
	if strings.HasSuffix(dir, string(filepath.Separator)) {
		return dir + name
	}
	return dir + string(filepath.Separator) + name
}
