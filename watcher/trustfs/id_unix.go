//go:build !windows

package trustfs

import (
	"io/fs"
	"syscall"
)

// IDOf returns fi's device and inode; the zero ID when fi has none. Sys
// is os's *syscall.Stat_t, or an *ID where a FileInfo keeps only that.
func IDOf(fi fs.FileInfo) ID {
	if fi == nil {
		return ID{}
	}
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)} // Dev is 32 bits on some platforms
	case *ID:
		return *st
	}
	return ID{}
}
