package after

import (
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// linkOpen links the open file f (not a path looked up again) to dst, by
// linkat(2) of its /proc/self/fd entry with AT_SYMLINK_FOLLOW. Without
// /proc it fails with fs.ErrNotExist and the caller copies instead.
func linkOpen(f *os.File, dst string) error {
	src := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	from, err := syscall.BytePtrFromString(src)
	if err != nil {
		return err
	}
	to, err := syscall.BytePtrFromString(dst)
	if err != nil {
		return err
	}
	const atSymlinkFollow = 0x400
	cwd := -0x64 // AT_FDCWD
	_, _, e := syscall.Syscall6(syscall.SYS_LINKAT, uintptr(cwd), uintptr(unsafe.Pointer(from)),
		uintptr(cwd), uintptr(unsafe.Pointer(to)), atSymlinkFollow, 0)
	if e != 0 {
		return &os.LinkError{Op: "link", Old: src, New: dst, Err: e}
	}
	return nil
}
