//go:build !windows

package queue

import (
	"errors"
	"os"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
)

// lockFile takes bbolt's lock on the open state file f (flock: shared, or
// exclusive as a writer takes it), waiting up to timeout; it fails with
// bolt.ErrTimeout. Closing f releases it.
func lockFile(f *os.File, exclusive bool, timeout time.Duration) error {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		if time.Now().After(deadline) {
			return bolt.ErrTimeout
		}
		time.Sleep(50 * time.Millisecond)
	}
}
