//go:build !windows

package trustfs

import (
	"io/fs"
	"syscall"
)

// IDOf returns fi's device and inode; the zero ID when fi has none.
func IDOf(fi fs.FileInfo) ID {
	if fi == nil {
		return ID{}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return ID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)} // Dev is 32 bits on some platforms
	}
	return ID{}
}
