package queue

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Report is what Check found in a state file.
type Report struct {
	Path string
	Size int64
	// Pages is the number of pages the file's meta page counts; Jobs the
	// job records its jobs bucket holds (readable as bbolt records; their
	// JSON is not decoded).
	Pages uint64
	Jobs  int
	// Problems lists what is wrong, the first ones in full; More counts the
	// rest. None: the file is sound.
	Problems []string
	More     int
	// Bounded: the leaves of the paths and sha256 indexes were not read.
	Bounded bool
}

// Damaged reports whether the check found anything wrong.
func (r Report) Damaged() bool { return len(r.Problems) > 0 }

// Check checks the state file in dir without opening it in bbolt: every
// page reachable from its meta page is read, bounds-checked and walked
// (buckets, key order, no page used twice), and the freelist is compared
// with what the walk reached, which is what bbolt's tx.Check does, on a
// reader that cannot panic. It waits up to timeout for a running splatd's
// lock (ErrLocked). A missing file is an error matching fs.ErrNotExist.
func Check(dir string, timeout time.Duration) (Report, error) {
	return check(dir, timeout, false)
}

// boundedOver is the file size above which Open checks the state file
// bounded: the leaves of the paths and sha256 indexes are not read, only the
// pages above them, and a damaged leaf is met at first use as a DamagedError
// (docs/architecture.md, "The state file").
const boundedOver = 64 << 20

// check is Check, bounded over boundedOver when bounded is set.
func check(dir string, timeout time.Duration, bounded bool) (Report, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if err != nil {
		return Report{Path: path}, err
	}
	defer f.Close()
	if err := lockFile(f, false, timeout); errors.Is(err, bolt.ErrTimeout) {
		return Report{Path: path}, &lockedError{dir: dir}
	} else if err != nil {
		return Report{Path: path}, fmt.Errorf("lock %s: %w", path, err)
	}
	return checkFile(f, path, bounded)
}

// checkFile checks the open state file f.
func checkFile(f *os.File, path string, bounded bool) (Report, error) {
	rep := Report{Path: path}
	fi, err := f.Stat()
	if err != nil {
		return rep, err
	}
	rep.Size = fi.Size()
	if rep.Size == 0 {
		rep.Problems = []string{"the file is empty (0 bytes): whatever it held is lost"}
		return rep, nil
	}
	pf, err := openPages(f, rep.Size)
	if pf != nil {
		rep.Pages = pf.meta.hwm
	}
	if err != nil {
		rep.Problems = []string{err.Error()}
		return rep, nil
	}
	w := &walker{pf: pf, value: func(b []string, _, _ []byte) {
		if len(b) == 1 && b[0] == string(bucketJobs) {
			rep.Jobs++
		}
	}}
	if bounded && rep.Size > boundedOver {
		w.shallow = map[string]bool{string(bucketPaths): true, string(bucketSHA): true}
		rep.Bounded = true
	}
	w.walk()
	w.freelist()
	rep.Problems, rep.More = w.probs.list, w.probs.more
	return rep, nil
}

// inspect is Open's look at the state file before bbolt opens it: fresh
// says why there is no store yet ("" when there is one), and a damaged
// file is a *DamagedError. The check holds the file's shared lock, so a
// running splatd's writes are never read half done.
func inspect(dir, path, command string, timeout time.Duration) (fresh string, err error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "there was no " + FileName, nil
	case err != nil:
		return "", fmt.Errorf("state file: %w", err)
	case fi.Size() == 0:
		return FileName + " was empty (0 bytes): whatever it held is lost", nil
	}
	rep, err := check(dir, timeout, true)
	if err != nil || !rep.Damaged() {
		return "", err
	}
	return "", &DamagedError{Path: rep.Path, Problems: rep.Problems, More: rep.More, Command: command}
}

// syncDir makes the entries of dir durable (a new state file's name).
// Windows has no fsync of a folder (NTFS journals its entries).
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
