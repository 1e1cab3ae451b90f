package watcher

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/splatd/splatd/state"
)

// folder is one folder as load read it: its listing, with the Lstat of its
// first statAhead wanted files (and of entries of unknown type).
type folder struct {
	d        *os.Root // nil: it could not be opened
	dir      string
	ents     []dirEntry
	infos    []fs.FileInfo // by ents' index, where read is readStat; nil: vanished
	read     []readState   // by ents' index
	err      error         // listing the top folder of a walk
	limitHit bool          // its watch failed on an inotify limit
}

// readState is what load did with one entry of a folder.
type readState uint8

const (
	readNone   readState = iota // nothing: visit stats it if it wants it
	readStat                    // stat'ed (infos)
	readUnseen                  // a light scan took it as unchanged, unstat'ed
)

// maxAhead bounds the folders a walk reads ahead of the one it visits, and
// so, with statAhead, the stat results it holds.
const maxAhead = 4

// statAhead bounds the stats load takes ahead of visit in one folder, and
// so the memory a folder read ahead holds.
const statAhead = 4096

// load reads the folder dir, open as d: it gets its watch first, then is
// listed, then its wanted files are stat'ed. Only the listing and one
// fstatat per wanted file (or entry of unknown type) touch the disk; a
// light scan of a folder watched before it skips the fstatat of files the
// tracker has as done under the same inode. load may run ahead of the walk,
// on another goroutine: it changes nothing of st.
func (w *Watcher) load(r *root, d *os.Root, dir string, st *scanState, top bool) *folder {
	f := &folder{d: d, dir: dir}
	light := st.light && w.watching(dir)
	if st.tryWatch {
		f.limitHit = w.watchDir(r, dir)
	}
	f.ents, f.err = w.listDir(d, dir, top)
	f.infos, f.read = make([]fs.FileInfo, len(f.ents)), make([]readState, len(f.ents))
	stats := 0
	for i, e := range f.ents {
		if e.typ == typeUnknown {
			fi, err := d.Lstat(e.name)
			if err != nil {
				continue // vanished since the listing
			}
			if f.ents[i].typ = typeOther; fi.IsDir() {
				f.ents[i].typ = typeDir
			}
			f.infos[i], f.read[i] = fi, readStat
			continue
		}
		if e.typ == typeDir || !r.wants(e.name) || stats >= statAhead {
			continue
		}
		if light && w.tr.seenUnchanged(r, dir, e.name, e.ino) {
			f.read[i] = readUnseen
			continue
		}
		stats++
		f.infos[i], _ = d.Lstat(e.name) // nil: vanished since the listing
		f.read[i] = readStat
	}
	return f
}

// lookahead loads a folder's subfolders in order, up to GOMAXPROCS (at
// most maxAhead) ahead of the one visited, each on its own goroutine. A
// light scan stats almost nothing and reads none ahead.
type lookahead struct {
	w     *Watcher
	r     *root
	f     *folder
	subs  []int
	st    *scanState
	ready []chan *folder
	n     int // subfolders started
}

func newLookahead(w *Watcher, r *root, f *folder, subs []int, st *scanState) *lookahead {
	a := &lookahead{w: w, r: r, f: f, subs: subs, st: st}
	window := min(runtime.GOMAXPROCS(0), maxAhead)
	if st.light {
		window = 0
	}
	for range min(len(subs), window) {
		a.start()
	}
	return a
}

// start loads the next subfolder on its own goroutine.
func (a *lookahead) start() {
	i := a.subs[a.n]
	a.n++
	ch := make(chan *folder, 1)
	a.ready = append(a.ready, ch)
	go func() {
		ch <- a.w.loadSub(a.r, a.f.d, filepath.Join(a.f.dir, a.f.ents[i].name), a.f.ents[i].name, a.st)
	}()
}

// next is the next subfolder, loaded; it starts the one after the window.
func (a *lookahead) next() *folder {
	if len(a.ready) == 0 { // no window
		i := a.subs[a.n]
		a.n++
		return a.w.loadSub(a.r, a.f.d, filepath.Join(a.f.dir, a.f.ents[i].name), a.f.ents[i].name, a.st)
	}
	ch := a.ready[0]
	a.ready = a.ready[1:]
	if a.n < len(a.subs) {
		a.start()
	}
	return <-ch
}

// loadSub opens the subfolder name of d, at path p, and loads it.
func (w *Watcher) loadSub(r *root, d *os.Root, p, name string, st *scanState) *folder {
	sub, err := d.OpenRoot(name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn().Err(err).Str("path", state.Shown(p)).Msg("cannot read folder; skipping it")
		}
		return &folder{dir: p}
	}
	return w.load(r, sub, p, st, false)
}

// childPath is filepath.Join(dir, name) for a clean dir and a name from
// its listing, which has no separator, without cleaning it again.
func childPath(dir, name string) string {
	if strings.HasSuffix(dir, string(filepath.Separator)) {
		return dir + name
	}
	return dir + string(filepath.Separator) + name
}
