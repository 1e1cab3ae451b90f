package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/watcher/trustfs"
)

// A fleet's daemons announce themselves in fleetDir at the top of each
// watch folder, one file each, named by member key, holding the nonce of
// the member's start (and fleetIdle on a second line while it has no work
// of its own) and written every fleetBeat. A member whose file did
// not change while this daemon wrote its own fleetMissed times is gone:
// counted in this daemon's own beats, so a reader that stalls (a loaded
// host) does not take everyone else for gone as it wakes.
const (
	fleetDir    = ".splatd-fleet"
	fleetSuffix = ".splatd-peer"
	fleetBeat   = 5 * time.Second
	fleetMissed = 3
	fleetReread = time.Second
	fleetMax    = 64 // members read from one folder at most
	fleetIdle   = "idle"
)

// fleet is uploader.Fleet over the announcement files of the watch folders.
type fleet struct {
	self, nonce string
	fs          *trustfs.FS // the watch folders' trust boundary
	roots       func() []string
	now         func() time.Time
	log         zerolog.Logger
	started     time.Time
	// busy reports whether this daemon has work of its own left (nil: it
	// has); set before the first announce.
	busy func() bool

	mu      sync.Mutex
	wrote   bool // idle, as last written
	read    map[string]*fleetView
	failing map[string]bool // folders whose announcement last failed (logged once)
}

// fleetView is one folder's members as last read.
type fleetView struct {
	members map[string]*member
	at      time.Time
}

// member is one announcement file as last read.
type member struct {
	nonce  string
	idle   bool // announced no work of its own left
	stamp  time.Time
	size   int64 // with stamp, tells a changed file (idle changes the size)
	missed int   // this daemon's beats since the file last changed
}

var _ uploader.Fleet = (*fleet)(nil)

// newFleet is the fleet of the daemon named identity on the roots.
func newFleet(fsys *trustfs.FS, identity string, roots func() []string, now func() time.Time, log zerolog.Logger) *fleet {
	sum := sha256.Sum256([]byte(identity))
	return &fleet{self: hex.EncodeToString(sum[:8]), nonce: strconv.FormatInt(now().UnixNano(), 36),
		fs: fsys, roots: roots, now: now, log: log, started: now(), read: map[string]*fleetView{}, failing: map[string]bool{}}
}

// poolFleet is the pool's Fleet: nil without one.
func (d *Daemon) poolFleet() uploader.Fleet {
	if d.fleet == nil {
		return nil
	}
	return d.fleet
}

// fleetClients is the pacer's Options.Clients: 0 without a fleet.
func (d *Daemon) fleetClients() int {
	if d.fleet == nil {
		return 0
	}
	return d.fleet.clients()
}

// fleetBusy reports whether this daemon has work of its own: a job not
// final that is not parked on a peer's share (true when unknown).
func (d *Daemon) fleetBusy() bool {
	st, err := d.store.Stats()
	if err != nil {
		return true
	}
	open := 0
	for stage, n := range st.Stages {
		if !stage.Final() {
			open += n
		}
	}
	return open > d.pool.PeerWaiting()
}

// Self is this daemon's member key.
func (f *fleet) Self() string { return f.self }

// Members are root's live members, read again at most every fleetReread;
// known is false for one beat after the start, while the members started
// with this daemon may not have announced themselves yet.
func (f *fleet) Members(root string) (members map[string]string, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.view(root)
	if f.now().Sub(v.at) >= fleetReread {
		f.refresh(root, v, false)
	}
	out := make(map[string]string, len(v.members))
	for k, m := range v.members {
		if m.missed < fleetMissed {
			out[k] = m.nonce
		}
	}
	return out, f.now().Sub(f.started) >= fleetBeat
}

// view is root's view, made empty on first use.
func (f *fleet) view(root string) *fleetView {
	v, ok := f.read[root]
	if !ok {
		v = &fleetView{members: map[string]*member{}}
		f.read[root] = v
	}
	return v
}

// refresh reads root's announcement files into v; beat counts one of this
// daemon's writes against the files that did not change since the last.
// Anything else in fleetDir is ignored (the folder is not trusted).
func (f *fleet) refresh(root string, v *fleetView, beat bool) {
	v.at = f.now()
	seen := map[string]bool{}
	for _, e := range f.entries(root) {
		key, ok := strings.CutSuffix(e.Name(), fleetSuffix)
		if !ok || !memberKey(key) || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		seen[key] = true
		m, ok := v.members[key]
		if ok && fi.ModTime().Equal(m.stamp) && fi.Size() == m.size {
			if beat && key != f.self { // its own file, rewritten within one mtime tick, is not missed
				m.missed++
			}
			continue
		}
		b, err := f.fs.ReadSmall(root, filepath.Join(root, fleetDir, e.Name()), 64)
		if err != nil {
			continue
		}
		nonce, rest, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		v.members[key] = &member{nonce: strings.TrimSpace(nonce), idle: strings.TrimSpace(rest) == fleetIdle, stamp: fi.ModTime(), size: fi.Size()}
	}
	for key := range v.members {
		if !seen[key] {
			delete(v.members, key) // withdrawn
		}
	}
}

// entries lists root's fleetDir, at most fleetMax entries.
func (f *fleet) entries(root string) []fs.DirEntry {
	r, err := f.fs.OpenRoot(root)
	if err != nil {
		return nil
	}
	defer r.Close()
	d, err := r.Open(fleetDir)
	if err != nil {
		return nil
	}
	defer d.Close()
	entries, err := d.ReadDir(fleetMax)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	return entries
}

// memberKey reports whether s is a member key: 16 lowercase hex digits.
func memberKey(s string) bool {
	if len(s) != 16 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// announce writes or touches this daemon's file in every watch folder (a
// beat).
func (f *fleet) announce() { f.write(true) }

// write writes this daemon's file in every watch folder and reads the
// folders again; beat counts the write against the files that did not
// change (a write between beats, for a change of idle, does not).
func (f *fleet) write(beat bool) {
	idle := f.idle()
	f.mu.Lock()
	f.wrote = idle
	f.mu.Unlock()
	for _, root := range f.roots() {
		r, err := f.fs.OpenRoot(root)
		if err != nil {
			continue
		}
		err = r.Mkdir(fleetDir, 0o755)
		if err == nil || errors.Is(err, fs.ErrExist) {
			err = f.fs.WriteAtomic(root, f.file(root), f.announcement(), 0o644)
		}
		r.Close()
		f.mu.Lock()
		if failed := err != nil; failed != f.failing[root] {
			f.failing[root] = failed
			if failed {
				f.log.Warn().Err(err).Str("folder", state.Shown(root)).Msg("cannot announce this daemon to its fleet; its peers do not leave it a share")
			}
		}
		f.refresh(root, f.view(root), beat)
		f.mu.Unlock()
	}
}

// between is the work of a second between beats: the file is written
// again when this daemon's idle changed since it was, and every folder is
// read again, so the pacer's clients are at most a second or two old.
func (f *fleet) between() {
	idle := f.idle()
	f.mu.Lock()
	changed := idle != f.wrote
	f.mu.Unlock()
	if changed {
		f.write(false)
		return
	}
	for _, root := range f.roots() {
		f.mu.Lock()
		f.refresh(root, f.view(root), false)
		f.mu.Unlock()
	}
}

// idle reports whether this daemon has no work of its own left.
func (f *fleet) idle() bool { return f.busy != nil && !f.busy() }

// announcement is the content of this daemon's announcement file.
func (f *fleet) announcement() []byte {
	f.mu.Lock()
	idle := f.wrote
	f.mu.Unlock()
	if idle {
		return []byte(f.nonce + "\n" + fleetIdle + "\n")
	}
	return []byte(f.nonce + "\n")
}

// clients is the pacer's count of the token's clients with work left: this
// daemon and every live member of its folders not announced idle; 0 (not
// known) in the first beat after the start.
func (f *fleet) clients() int {
	roots := f.roots()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.now().Sub(f.started) < fleetBeat {
		return 0
	}
	busy := map[string]bool{}
	for _, root := range roots {
		for k, m := range f.view(root).members {
			if k != f.self && !m.idle && m.missed < fleetMissed {
				busy[k] = true
			}
		}
	}
	return 1 + len(busy)
}

// file is this daemon's announcement file in root.
func (f *fleet) file(root string) string { return filepath.Join(root, fleetDir, f.self+fleetSuffix) }

// withdraw removes this daemon's file from every watch folder: its share
// goes to the others at once.
func (f *fleet) withdraw() {
	for _, root := range f.roots() {
		_ = f.fs.RemoveIf(root, f.file(root), trustfs.ID{})
	}
}

// run announces this daemon every fleetBeat while its work is not paused
// (a refused token): a paused daemon withdraws, and its share goes to the
// others. Between beats it reads the folders every fleetReread. It
// withdraws when ctx ends.
func (f *fleet) run(ctx context.Context, paused func() bool) error {
	t := time.NewTicker(fleetReread)
	defer t.Stop()
	beat := f.now().Add(fleetBeat)
	for {
		select {
		case <-ctx.Done():
			f.withdraw()
			return nil
		case <-t.C:
		}
		switch now := f.now(); {
		case now.Before(beat):
			if paused() {
				continue
			}
			f.between()
		case paused():
			beat = now.Add(fleetBeat)
			f.withdraw()
		default:
			beat = now.Add(fleetBeat)
			f.announce()
		}
	}
}
