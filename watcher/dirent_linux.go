package watcher

import (
	"encoding/binary"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/splatd/splatd/watcher/trustfs"
	"golang.org/x/sys/unix"
)

// linux_dirent64's layout: d_ino, d_off, d_reclen, d_type, then the name.
const (
	direntIno    = 0
	direntReclen = 16
	direntType   = 18
	direntName   = 19
	direntMin    = 24 // the shortest record: a name of up to 4 bytes, padded to 8
)

// dirFile is one folder open for a scan: its listing and the stats of its
// names go through its one descriptor.
type dirFile struct {
	f  *os.File
	rc syscall.RawConn
}

// openDir opens the folder d is open on.
func openDir(d *os.Root) (*dirFile, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &dirFile{f: f, rc: rc}, nil
}

func (d *dirFile) Close() error { return d.f.Close() }

// direntBufs holds getdents buffers: a scan lists thousands of folders.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readDir lists the entries of the folder that keep accepts, each name
// with its type and inode number from the directory entry itself (no
// stat); typeUnknown where the file system does not say.
func (d *dirFile) readDir(keep func(dirEntry) bool) ([]dirEntry, error) {
	var out []dirEntry
	buf := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(buf)
	for {
		var n int
		var rerr error
		if err := d.rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.ReadDirent(int(fd), *buf)
			return rerr != syscall.EAGAIN
		}); err != nil {
			return out, err
		}
		if rerr != nil {
			return out, &fs.PathError{Op: "getdents", Path: d.f.Name(), Err: rerr}
		}
		if n <= 0 {
			return compact(out), nil
		}
		out = parseDirents((*buf)[:n], out, keep)
	}
}

// lstat sets infos[k] to the lstat of names[k], nil where it failed
// (vanished since the listing) or the name is "". Each is one fstatat in
// the folder, which follows no link; a name with a separator is refused.
func (d *dirFile) lstat(names []string, infos []fs.FileInfo) {
	sts := make([]statInfo, len(names))
	_ = d.rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		for k, n := range names {
			if n == "" || n == "." || n == ".." || strings.ContainsRune(n, '/') {
				continue
			}
			if unix.Fstatat(int(fd), n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			sts[k] = statInfo{name: n, size: st.Size, mtime: st.Mtim.Nano(), mode: st.Mode,
				id: trustfs.ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}} // Dev is 32 bits on some platforms
			infos[k] = &sts[k]
		}
	})
}

// statInfo is the fs.FileInfo of one fstatat, as os.Lstat's would be but
// for Sys, which is its *trustfs.ID.
type statInfo struct {
	name  string
	size  int64
	mtime int64 // Unix ns
	mode  uint32
	id    trustfs.ID
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.size }
func (s *statInfo) ModTime() time.Time { return time.Unix(0, s.mtime) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.id }

// Mode is the mode bits as os.FileInfo.Mode has them.
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.mode & 0o777)
	switch s.mode & unix.S_IFMT {
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.mode&unix.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.mode&unix.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}

// parseDirents appends the entries of a getdents64 buffer that keep
// accepts to out, without "." and "..". Their names share one string of
// their own, not a copy of the buffer: a folder of 100,000 files holds
// only the names it wants.
func parseDirents(b []byte, out []dirEntry, keep func(dirEntry) bool) []dirEntry {
	all := string(b) // the names keep is shown are slices of one copy of the buffer
	first, size := len(out), 0
	off := 0
	for len(b) >= direntName {
		reclen := int(binary.NativeEndian.Uint16(b[direntReclen:]))
		if reclen < direntName || reclen > len(b) {
			break
		}
		name := b[direntName:reclen]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if s := all[off+direntName : off+direntName+len(name)]; s != "." && s != ".." && s != "" {
			e := dirEntry{name: s, typ: typeOf(b[direntType]), ino: binary.NativeEndian.Uint64(b[direntIno:])}
			if keep(e) {
				out, size = append(out, e), size+len(s)
			}
		}
		b, off = b[reclen:], off+reclen
	}
	var names strings.Builder
	names.Grow(size)
	for _, e := range out[first:] {
		names.WriteString(e.name)
	}
	kept, at := names.String(), 0
	for i := range out[first:] {
		n := len(out[first+i].name)
		out[first+i].name, at = kept[at:at+n], at+n
	}
	return out
}

// compact returns ents in a slice of their own length when growing left it
// much larger.
func compact(ents []dirEntry) []dirEntry {
	if cap(ents) > len(ents)+len(ents)/4+64 {
		return slices.Clone(ents)
	}
	return ents
}

func typeOf(dt byte) fileType {
	switch dt {
	case syscall.DT_DIR:
		return typeDir
	case syscall.DT_UNKNOWN:
		return typeUnknown
	default:
		return typeOther
	}
}
