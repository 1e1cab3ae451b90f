package lazyfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is one mount: a backing folder, the mount point and the durable state.
type FS struct {
	m       *Machine
	name    string
	backing string
	mnt     string
	server  *fuse.Server

	// Guarded by m.mu.
	nextID  uint64
	ids     map[uint64]uint64 // backing inode number → node id
	durable map[uint64]*dnode // node id → what a cut keeps of it
	dirty   map[uint64]*dirt  // node id → file data written since its last fsync
}

// rootID is the mount root's node id (FUSE's own root id).
const rootID = 1

type kind uint8

const (
	kFile kind = iota
	kDir
	kSymlink
	kSpecial // a socket or fifo: its type in mode
)

// dnode is a node's durable state. A file's data is what its last fsync
// saw (empty when none did); a folder's entries are what its last fsync
// saw (none when none did).
type dnode struct {
	kind    kind
	mode    uint32 // permission bits (and the type of a kSpecial)
	mtime   time.Time
	data    []byte
	target  string
	entries map[string]uint64
}

// dirt is the part of a file written since its last fsync.
type dirt struct {
	whole  bool
	ranges [][2]int64
}

const maxRanges = 64

func (d *dirt) add(off, n int64) {
	if d.whole {
		return
	}
	if len(d.ranges) >= maxRanges {
		d.whole, d.ranges = true, nil
		return
	}
	d.ranges = append(d.ranges, [2]int64{off, off + n})
}

// New makes the file system name over the folder backing (created if
// missing), to be mounted at mnt. Everything already in backing is
// durable.
func New(m *Machine, name, backing, mnt string) (*FS, error) {
	for _, d := range []string{backing, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	f := &FS{m: m, name: name, backing: backing, mnt: mnt}
	m.mu.Lock()
	defer m.mu.Unlock()
	return f, f.rescan()
}

// rescan makes the whole backing folder the durable state, with fresh
// node ids. Called with m.mu held.
func (f *FS) rescan() error {
	f.nextID = rootID
	f.ids, f.durable, f.dirty = map[uint64]uint64{}, map[uint64]*dnode{}, map[uint64]*dirt{}
	var st syscall.Stat_t
	if err := syscall.Lstat(f.backing, &st); err != nil {
		return err
	}
	f.ids[st.Ino] = rootID
	return f.snapshotTree(f.backing, rootID, &st)
}

// snapshotTree records p (node id, stat st) and, for a folder, all below
// it as durable. Called with m.mu held.
func (f *FS) snapshotTree(p string, id uint64, st *syscall.Stat_t) error {
	d, err := f.snapshot(p, id, st)
	if err != nil || d.kind != kDir {
		return err
	}
	if err := f.syncDir(p, id); err != nil {
		return err
	}
	for name, cid := range d.entries {
		cp := filepath.Join(p, name)
		var cst syscall.Stat_t
		if err := syscall.Lstat(cp, &cst); err != nil {
			return err
		}
		if err := f.snapshotTree(cp, cid, &cst); err != nil {
			return err
		}
	}
	return nil
}

// snapshot records node id at p as durable: a file's whole data, a
// symlink's target, a folder with no entries yet. Called with m.mu held.
func (f *FS) snapshot(p string, id uint64, st *syscall.Stat_t) (*dnode, error) {
	d := &dnode{mode: st.Mode & 0o7777, mtime: time.Unix(st.Mtim.Unix())}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		d.kind, d.entries = kDir, map[string]uint64{}
	case syscall.S_IFLNK:
		t, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		d.kind, d.target = kSymlink, t
	case syscall.S_IFREG:
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		d.data = b
	case syscall.S_IFSOCK, syscall.S_IFIFO:
		d.kind, d.mode = kSpecial, st.Mode
	default:
		return nil, fmt.Errorf("lazyfs: %s: a device", p)
	}
	f.durable[id] = d
	delete(f.dirty, id)
	return d, nil
}

// idOf is the node id of the backing inode st, given one if new. Called
// with m.mu held.
func (f *FS) idOf(st *syscall.Stat_t) uint64 {
	if id, ok := f.ids[st.Ino]; ok {
		return id
	}
	return f.freshID(st)
}

// freshID gives the backing inode st a new node id: an inode number
// reused by the backing file system is a new node. Called with m.mu held.
func (f *FS) freshID(st *syscall.Stat_t) uint64 {
	f.nextID++
	f.ids[st.Ino] = f.nextID
	return f.nextID
}

// syncFile makes node id's data, mode and mtime durable, read through a
// read-only reopening of fd (which may be write-only). Called with m.mu
// held.
func (f *FS) syncFile(id uint64, wfd int) error {
	fd, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", wfd), syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	d := f.durable[id]
	dt := f.dirty[id]
	if d == nil || d.kind != kFile {
		d, dt = &dnode{kind: kFile}, &dirt{whole: true}
		f.durable[id] = d
	}
	d.mode, d.mtime = st.Mode&0o7777, time.Unix(st.Mtim.Unix())
	if dt == nil {
		if int64(len(d.data)) == st.Size {
			return nil
		}
		dt = &dirt{whole: true}
	}
	delete(f.dirty, id)
	if dt.whole {
		d.data = make([]byte, st.Size)
		return preadFull(fd, d.data, 0)
	}
	if st.Size <= int64(cap(d.data)) {
		old := len(d.data)
		d.data = d.data[:st.Size]
		if int64(old) < st.Size {
			clear(d.data[old:])
		}
	} else {
		d.data = append(d.data, make([]byte, st.Size-int64(len(d.data)))...)
	}
	for _, r := range dt.ranges {
		lo, hi := min(r[0], st.Size), min(r[1], st.Size)
		if err := preadFull(fd, d.data[lo:hi], lo); err != nil {
			return err
		}
	}
	return nil
}

func preadFull(fd int, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := syscall.Pread(fd, b, off)
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrUnexpectedEOF
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}

// syncDir makes folder id's entries (at p) durable; an entry's node that
// has no durable state yet gets an empty one (a file with no data fsynced,
// a folder with no entries). Called with m.mu held.
func (f *FS) syncDir(p string, id uint64) error {
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	entries := map[string]uint64{}
	for _, e := range ents {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(p, e.Name()), &st); err != nil {
			if errors.Is(err, syscall.ENOENT) {
				continue
			}
			return err
		}
		cid := f.idOf(&st)
		entries[e.Name()] = cid
		if f.durable[cid] == nil {
			d := &dnode{mode: st.Mode & 0o7777, mtime: time.Unix(st.Mtim.Unix())}
			switch st.Mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				d.kind, d.entries = kDir, map[string]uint64{}
			case syscall.S_IFLNK:
				d.kind = kSymlink
				d.target, _ = os.Readlink(filepath.Join(p, e.Name()))
			case syscall.S_IFSOCK, syscall.S_IFIFO:
				d.kind, d.mode = kSpecial, st.Mode
			}
			f.durable[cid] = d
		}
	}
	d := f.durable[id]
	if d == nil {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		d = &dnode{kind: kDir, mode: st.Mode & 0o7777}
		f.durable[id] = d
	}
	d.entries = entries
	return nil
}

// Mount mounts the file system (mount(2) directly, fusermount failing
// that).
func (f *FS) Mount() error {
	sec := time.Second
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount: true,
			FsName:      "lazyfs-" + f.name,
			Name:        "lazyfs",
			MaxWrite:    1 << 20,
		},
		EntryTimeout:   &sec,
		AttrTimeout:    &sec,
		RootStableAttr: &fs.StableAttr{Ino: rootID},
	}
	srv, err := fs.Mount(f.mnt, &node{f: f}, opts)
	if err != nil {
		return fmt.Errorf("lazyfs: mount %s: %w", f.mnt, err)
	}
	f.server = srv
	return nil
}

// Name is the file system's name, as in Op.FS.
func (f *FS) Name() string { return f.name }

// Mountpoint is where the file system is mounted.
func (f *FS) Mountpoint() string { return f.mnt }

// Backing is the backing folder.
func (f *FS) Backing() string { return f.backing }

// Unmount unmounts the file system; a busy mount is retried for 5 s,
// then detached.
func (f *FS) Unmount() error {
	if f.server == nil {
		return nil
	}
	var err error
	for range 50 {
		if err = f.server.Unmount(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		if derr := syscall.Unmount(f.mnt, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("lazyfs: unmount %s: %w (detach: %v)", f.mnt, err, derr)
		}
	}
	f.server.Wait()
	f.server = nil
	return nil
}

// Dropped is what a cut undid.
type Dropped struct {
	Lost     []string // names that were live and are gone
	Revived  []string // names that were gone and are back
	Reverted []string // files whose data went back to an older state
	Anomaly  []string // durable states no real file system could hold
}

// Empty says the cut undid nothing.
func (d Dropped) Empty() bool { return len(d.Lost)+len(d.Revived)+len(d.Reverted) == 0 }

// Apply rebuilds the backing folder from the durable state, as the disk
// holds it after the cut, and makes that the new durable state. The file
// system must be unmounted. Node ids survive, and the mount shows them as
// inode numbers, so a file keeps its inode number across a cut as on a
// real disk.
func (f *FS) Apply() (Dropped, error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	var dr Dropped
	live := map[string]uint64{}
	if err := f.liveTree(f.backing, "", live); err != nil {
		return dr, err
	}
	durable := map[string]uint64{}
	f.durableTree(rootID, "", durable, map[uint64]bool{}, &dr)
	for p, id := range live {
		did, ok := durable[p]
		switch {
		case !ok:
			dr.Lost = append(dr.Lost, p)
		case did != id:
			dr.Revived = append(dr.Revived, p+" (another file)")
		case f.durable[id].kind == kFile && !f.sameData(filepath.Join(f.backing, p), f.durable[id]):
			dr.Reverted = append(dr.Reverted, p)
		}
	}
	for p := range durable {
		if _, ok := live[p]; !ok {
			dr.Revived = append(dr.Revived, p)
		}
	}
	slices.Sort(dr.Lost)
	slices.Sort(dr.Revived)
	slices.Sort(dr.Reverted)

	tmp := f.backing + ".cut"
	old := f.backing + ".old"
	for _, d := range []string{tmp, old} {
		if err := os.RemoveAll(d); err != nil {
			return dr, err
		}
	}
	if err := os.Mkdir(tmp, os.FileMode(f.durable[rootID].mode)); err != nil {
		return dr, err
	}
	built := map[uint64]string{}
	ids := map[uint64]uint64{}
	if err := f.build(rootID, tmp, "", built, ids); err != nil {
		return dr, err
	}
	if err := os.Rename(f.backing, old); err != nil {
		return dr, err
	}
	if err := os.Rename(tmp, f.backing); err != nil {
		return dr, err
	}
	if err := os.RemoveAll(old); err != nil {
		return dr, err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(f.backing, &st); err != nil {
		return dr, err
	}
	ids[st.Ino] = rootID
	f.ids, f.dirty = ids, map[uint64]*dirt{}
	for id := range f.durable {
		if _, ok := built[id]; !ok && id != rootID {
			delete(f.durable, id)
		}
	}
	return dr, nil
}

// liveTree lists every name under p (rel to the root) with its node id.
func (f *FS) liveTree(p, rel string, out map[string]uint64) error {
	ents, err := os.ReadDir(p)
	if err != nil {
		return err
	}
	for _, e := range ents {
		cp, crel := filepath.Join(p, e.Name()), filepath.Join(rel, e.Name())
		var st syscall.Stat_t
		if err := syscall.Lstat(cp, &st); err != nil {
			return err
		}
		out[crel] = f.idOf(&st)
		if e.IsDir() {
			if err := f.liveTree(cp, crel, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// durableTree lists every name the durable state holds below folder id.
func (f *FS) durableTree(id uint64, rel string, out map[string]uint64, seen map[uint64]bool, dr *Dropped) {
	for name, cid := range f.durable[id].entries {
		crel := filepath.Join(rel, name)
		d := f.durable[cid]
		if d.kind == kDir {
			if seen[cid] {
				dr.Anomaly = append(dr.Anomaly, crel+": a folder durable under two names; kept at the first")
				continue
			}
			seen[cid] = true
			out[crel] = cid
			f.durableTree(cid, crel, out, seen, dr)
			continue
		}
		out[crel] = cid
	}
}

func (f *FS) sameData(p string, d *dnode) bool {
	b, err := os.ReadFile(p)
	return err == nil && string(b) == string(d.data)
}

// build writes folder id's durable entries into the folder p; built maps
// a node id to its first path (a second name is a hard link), ids the new
// backing inode numbers to node ids.
func (f *FS) build(id uint64, p, rel string, built map[uint64]string, ids map[uint64]uint64) error {
	names := make([]string, 0, len(f.durable[id].entries))
	for name := range f.durable[id].entries {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cid := f.durable[id].entries[name]
		d := f.durable[cid]
		cp := filepath.Join(p, name)
		if first, ok := built[cid]; ok {
			if d.kind == kDir {
				continue
			}
			if err := os.Link(first, cp); err != nil {
				return err
			}
			continue
		}
		built[cid] = cp
		switch d.kind {
		case kDir:
			if err := os.Mkdir(cp, os.FileMode(d.mode)); err != nil {
				return err
			}
			if err := f.build(cid, cp, filepath.Join(rel, name), built, ids); err != nil {
				return err
			}
		case kSymlink:
			if err := os.Symlink(d.target, cp); err != nil {
				return err
			}
		case kSpecial:
			if err := syscall.Mknod(cp, d.mode, 0); err != nil {
				return err
			}
		case kFile:
			if err := os.WriteFile(cp, d.data, 0o600); err != nil {
				return err
			}
			if err := os.Chmod(cp, os.FileMode(d.mode)); err != nil {
				return err
			}
			if err := os.Chtimes(cp, d.mtime, d.mtime); err != nil {
				return err
			}
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(cp, &st); err != nil {
			return err
		}
		ids[st.Ino] = cid
	}
	return nil
}
