package queue

import (
	"errors"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/windows"
)

// lockFile takes bbolt's lock on the open state file f (LockFileEx on the
// byte range bbolt locks: -1..0), waiting up to timeout; it fails with
// bolt.ErrTimeout. Closing f releases it.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	flags := uint32(windows.LOCKFILE_FAIL_IMMEDIATELY)
	if exclusive {
		flags |= windows.LOCKFILE_EXCLUSIVE_LOCK
	}
	deadline := time.Now().Add(timeout)
	const m1 = 1<<32 - 1
	for {
		err := windows.LockFileEx(windows.Handle(f.Fd()), flags, 0, 1, 0, &windows.Overlapped{Offset: m1, OffsetHigh: m1})
		if !errors.Is(err, windows.ERROR_LOCK_VIOLATION) {
			return err
		}
		if time.Now().After(deadline) {
			return bolt.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
}
