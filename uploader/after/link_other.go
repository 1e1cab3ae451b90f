//go:build !linux

package after

import (
	"io/fs"
	"os"
)

// linkOpen has no /proc/self/fd to link an open file by outside Linux: it reports
// fs.ErrNotExist, and the caller copies from the open file instead.
func linkOpen(f *os.File, dst string) error {
	return &os.LinkError{Op: "link", Old: f.Name(), New: dst, Err: fs.ErrNotExist}
}
