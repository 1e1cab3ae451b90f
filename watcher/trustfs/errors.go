package trustfs

import (
	"fmt"
	"io/fs"
)

// NotRegularError is a path that is not a regular file: a link, a pipe, a
// device, a socket or a folder. Its job fails with it; retrying cannot help.
type NotRegularError struct {
	Path string
	Kind string // "a symbolic link", "a named pipe (FIFO)", …
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, e.Kind)
}

// Invalid marks the error as a property of the file (the retry rule fails
// the job instead of retrying).
func (e *NotRegularError) Invalid() bool { return true }

// EscapeError is a path that leads out of its watch folder (a subfolder
// replaced by a link to somewhere else, or a path outside the folder).
type EscapeError struct {
	Path, Root string
	Err        error
}

func (e *EscapeError) Error() string {
	return fmt.Sprintf("%s leads out of the watch folder %s (a link to elsewhere?): refused", e.Path, e.Root)
}
func (e *EscapeError) Unwrap() error { return e.Err }

// Invalid: as NotRegularError.
func (e *EscapeError) Invalid() bool { return true }

// ReplacedError is a path that now names another file than the one a job
// holds (the same inode was expected): it is left alone.
type ReplacedError struct{ Path string }

func (e *ReplacedError) Error() string {
	return fmt.Sprintf("%s is no longer the file this job read (replaced since): left alone", e.Path)
}

// TooLargeError is a small file over its cap.
type TooLargeError struct {
	Path string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than %d bytes: refused", e.Path, e.Max)
}

// Invalid: as NotRegularError.
func (e *TooLargeError) Invalid() bool { return true }

// NameTooLongError is a name longer than the file system allows
// (ENAMETOOLONG): no such file can exist, so a lookup takes it as absent
// (errors.Is fs.ErrNotExist), and a write of it can never succeed.
type NameTooLongError struct{ Path string }

func (e *NameTooLongError) Error() string {
	return fmt.Sprintf("%s: name longer than the file system allows", e.Path)
}

// Is makes a lookup of such a name find nothing, as it would any other
// missing file.
func (e *NameTooLongError) Is(target error) bool { return target == fs.ErrNotExist }

// Invalid: retrying cannot help.
func (e *NameTooLongError) Invalid() bool { return true }
