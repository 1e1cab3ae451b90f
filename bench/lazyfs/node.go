package lazyfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one inode of the mount, its number the node id; every operation
// is done on the backing folder at the node's path.
type node struct {
	fs.Inode
	f *FS
}

var (
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeLinker     = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
	_ fs.NodeStatfser   = (*node)(nil)
	_ fs.FileWriter     = (*handle)(nil)
	_ fs.FileAllocater  = (*handle)(nil)
)

// rel is the node's path from the mount root (an orphan's is a name that
// does not exist).
func (n *node) rel() string { return n.Path(n.Root()) }

func (n *node) path() string { return filepath.Join(n.f.backing, n.rel()) }

func (n *node) child(name string) string { return filepath.Join(n.f.backing, n.rel(), name) }

func (n *node) op(ctx context.Context, kind, rel, to string) *Op {
	o := &Op{FS: n.f.name, Kind: kind, Path: rel, To: to}
	if c, ok := fuse.FromContext(ctx); ok {
		o.Pid = c.Pid
	}
	return o
}

func (n *node) enter(ctx context.Context, kind, rel, to string) syscall.Errno {
	var o *Op
	if kind != "" {
		o = n.op(ctx, kind, rel, to)
	}
	if !n.f.m.enter(o) {
		return syscall.EIO
	}
	return 0
}

// newChild makes the Inode of the backing inode st, fresh when the
// operation made that inode (create, mkdir, symlink).
func (n *node) newChild(ctx context.Context, st *syscall.Stat_t, fresh bool, out *fuse.EntryOut) *fs.Inode {
	n.f.m.mu.Lock()
	var id uint64
	if fresh {
		id = n.f.freshID(st)
		n.f.dirty[id] = &dirt{whole: true}
	} else {
		id = n.f.idOf(st)
	}
	n.f.m.mu.Unlock()
	out.Attr.FromStat(st)
	out.Attr.Ino = id
	return n.NewInode(ctx, &node{f: n.f}, fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: id})
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.enter(ctx, "", "", ""); e != 0 {
		return nil, e
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(n.child(name), &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, false, out), 0
}

func (n *node) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := n.enter(ctx, "", "", ""); e != 0 {
		return e
	}
	var st syscall.Stat_t
	var err error
	if h, ok := fh.(*handle); ok {
		err = syscall.Fstat(h.fd, &st)
	} else {
		err = syscall.Lstat(n.path(), &st)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if e := n.enter(ctx, "setattr", n.rel(), ""); e != 0 {
		return e
	}
	p := n.path()
	if sz, ok := in.GetSize(); ok {
		err := syscall.Truncate(p, int64(sz))
		n.f.m.mu.Lock()
		n.f.dirty[n.StableAttr().Ino] = &dirt{whole: true}
		n.f.m.mu.Unlock()
		if err != nil {
			return fs.ToErrno(err)
		}
	}
	if m, ok := in.GetMode(); ok {
		if err := syscall.Chmod(p, m); err != nil {
			return fs.ToErrno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		su, sg := -1, -1
		if uok {
			su = int(uid)
		}
		if gok {
			sg = int(gid)
		}
		if err := unix.Fchownat(unix.AT_FDCWD, p, su, sg, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	mtime, mok := in.GetMTime()
	atime, aok := in.GetATime()
	if mok || aok {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fs.ToErrno(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if e := n.enter(ctx, "", "", ""); e != 0 {
		return nil, 0, e
	}
	flags &^= syscall.O_APPEND | fuse.FMODE_EXEC
	fd, err := syscall.Open(n.path(), int(flags)|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 {
		n.f.m.mu.Lock()
		n.f.dirty[n.StableAttr().Ino] = &dirt{whole: true}
		n.f.m.mu.Unlock()
	}
	return n.newHandle(fd), 0, 0
}

func (n *node) newHandle(fd int) *handle {
	return &handle{lfile: fs.NewLoopbackFileFromOS(os.NewFile(uintptr(fd), "")), n: n, fd: fd}
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if e := n.enter(ctx, "create", filepath.Join(n.rel(), name), ""); e != 0 {
		return nil, nil, 0, e
	}
	flags &^= syscall.O_APPEND
	fd, err := syscall.Open(n.child(name), int(flags)|syscall.O_CREAT|syscall.O_CLOEXEC, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	ch := n.newChild(ctx, &st, true, out)
	return ch, ch.Operations().(*node).newHandle(fd), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.enter(ctx, "mkdir", filepath.Join(n.rel(), name), ""); e != 0 {
		return nil, e
	}
	p := n.child(name)
	if err := syscall.Mkdir(p, mode); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, true, out), 0
}

// Mknod makes sockets and fifos (a unix socket's bind comes here).
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&syscall.S_IFMT != syscall.S_IFSOCK && mode&syscall.S_IFMT != syscall.S_IFIFO {
		return nil, syscall.EPERM
	}
	if e := n.enter(ctx, "create", filepath.Join(n.rel(), name), ""); e != 0 {
		return nil, e
	}
	p := n.child(name)
	if err := syscall.Mknod(p, mode, 0); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, true, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if e := n.enter(ctx, "symlink", filepath.Join(n.rel(), name), ""); e != 0 {
		return nil, e
	}
	p := n.child(name)
	if err := syscall.Symlink(target, p); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, true, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	if e := n.enter(ctx, "", "", ""); e != 0 {
		return nil, e
	}
	t, err := os.Readlink(n.path())
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return []byte(t), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if e := n.enter(ctx, "unlink", filepath.Join(n.rel(), name), ""); e != 0 {
		return e
	}
	return fs.ToErrno(syscall.Unlink(n.child(name)))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if e := n.enter(ctx, "rmdir", filepath.Join(n.rel(), name), ""); e != 0 {
		return e
	}
	return fs.ToErrno(syscall.Rmdir(n.child(name)))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np := newParent.(*node)
	if e := n.enter(ctx, "rename", filepath.Join(n.rel(), name), filepath.Join(np.rel(), newName)); e != 0 {
		return e
	}
	return fs.ToErrno(unix.Renameat2(unix.AT_FDCWD, n.child(name), unix.AT_FDCWD, np.child(newName), uint(flags)))
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t := target.(*node)
	if e := n.enter(ctx, "link", t.rel(), filepath.Join(n.rel(), name)); e != 0 {
		return nil, e
	}
	p := n.child(name)
	if err := syscall.Link(t.path(), p); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return n.newChild(ctx, &st, false, out), 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	if e := n.enter(ctx, "", "", ""); e != 0 {
		return nil, e
	}
	p := n.path()
	ents, err := os.ReadDir(p)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	out := make([]fuse.DirEntry, 0, len(ents))
	n.f.m.mu.Lock()
	defer n.f.m.mu.Unlock()
	for _, e := range ents {
		var st syscall.Stat_t
		if syscall.Lstat(filepath.Join(p, e.Name()), &st) != nil {
			continue
		}
		out = append(out, fuse.DirEntry{Name: e.Name(), Mode: st.Mode & syscall.S_IFMT, Ino: n.f.idOf(&st)})
	}
	return fs.NewListDirStream(out), 0
}

// Fsync makes the node durable: a file's data, or a folder's entries. The
// backing file itself is not fsynced: its own durability is not what is
// modelled.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	dir := n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR
	kind := "fsync"
	if dir {
		kind = "fsyncdir"
	}
	if e := n.enter(ctx, kind, n.rel(), ""); e != 0 {
		return e
	}
	m := n.f.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.frozen {
		return syscall.EIO
	}
	id := n.StableAttr().Ino
	if dir {
		return fs.ToErrno(n.f.syncDir(n.path(), id))
	}
	if h, ok := fh.(*handle); ok {
		return fs.ToErrno(n.f.syncFile(id, h.fd))
	}
	fd, err := syscall.Open(n.path(), syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer syscall.Close(fd)
	return fs.ToErrno(n.f.syncFile(id, fd))
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var s syscall.Statfs_t
	if err := syscall.Statfs(n.f.backing, &s); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&s)
	return 0
}

// lfile is what an open file forwards to the backing file as it is: not
// its writes (handle.Write), not a passthrough descriptor the kernel would
// write through without telling.
type lfile interface {
	fs.FileReader
	fs.FileWriter
	fs.FileFlusher
	fs.FileReleaser
	fs.FileLseeker
	fs.FileAllocater
}

// handle is an open file of the mount.
type handle struct {
	lfile
	n  *node
	fd int
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if e := h.n.enter(ctx, "write", h.n.rel(), ""); e != 0 {
		return 0, e
	}
	w, errno := h.lfile.Write(ctx, data, off)
	// Marked once written: an fsync that comes between need not keep it,
	// the next one will.
	h.n.f.m.mu.Lock()
	id := h.n.StableAttr().Ino
	d := h.n.f.dirty[id]
	if d == nil {
		d = &dirt{}
		h.n.f.dirty[id] = d
	}
	d.add(off, int64(len(data)))
	h.n.f.m.mu.Unlock()
	return w, errno
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if e := h.n.enter(ctx, "write", h.n.rel(), ""); e != 0 {
		return e
	}
	errno := h.lfile.Allocate(ctx, off, size, mode)
	h.n.f.m.mu.Lock()
	h.n.f.dirty[h.n.StableAttr().Ino] = &dirt{whole: true}
	h.n.f.m.mu.Unlock()
	return errno
}
