package queue

import "golang.org/x/sys/unix"

// dropMapped tells the kernel the n mapped bytes at addr are not needed:
// a later read faults them in again from the page cache.
func dropMapped(addr uintptr, n int64) {
	if n > 0 {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, addr, uintptr(n), unix.MADV_DONTNEED)
	}
}
