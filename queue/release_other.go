//go:build !linux

package queue

// dropMapped does nothing here: the kernel's own reclaim decides.
func dropMapped(addr uintptr, n int64) {}
