package watcher

import (
	"encoding/binary"
	"io/fs"
	"os"
	"syscall"
)

// linux_dirent64's layout: d_ino, d_off, d_reclen, d_type, then the name.
const (
	direntIno    = 0
	direntReclen = 16
	direntType   = 18
	direntName   = 19
)

// readDir lists the folder d is open on, each name with its type and inode
// number from the directory entry itself (no stat); typeUnknown where the
// file system does not say.
func readDir(d *os.Root) ([]dirEntry, error) {
	f, err := d.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var out []dirEntry
	buf := make([]byte, 32<<10)
	for {
		var n int
		var rerr error
		if err := rc.Read(func(fd uintptr) bool {
			n, rerr = syscall.ReadDirent(int(fd), buf)
			return rerr != syscall.EAGAIN
		}); err != nil {
			return out, err
		}
		if rerr != nil {
			return out, &fs.PathError{Op: "getdents", Path: f.Name(), Err: rerr}
		}
		if n <= 0 {
			return out, nil
		}
		out = parseDirents(buf[:n], out)
	}
}

// parseDirents appends the entries of a getdents64 buffer to out, without
// "." and "..".
func parseDirents(b []byte, out []dirEntry) []dirEntry {
	all := string(b) // the names are slices of one copy of the buffer
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
			out = append(out, dirEntry{name: s, typ: typeOf(b[direntType]), ino: binary.NativeEndian.Uint64(b[direntIno:])})
		}
		b, off = b[reclen:], off+reclen
	}
	return out
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
