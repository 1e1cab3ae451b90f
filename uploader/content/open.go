package content

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
	"github.com/splatd/splatd/watcher/trustfs"
)

// A job's content is read from one descriptor, from its hash to its upload,
// and what is sent is hashed again against the recorded sha256
// (docs/architecture.md, "One open, one hash"). Another source (an
// encoding, a bundled folder) plugs in at openJob as a *step.File.

// openJob opens j's file through its watch folder. A missing file, a link
// (unless the folder follows links, and then only one that stays inside),
// a pipe, a device or a path out of the folder is a *step.FileError (the
// job fails with it).
func (s *Source) openJob(j state.Job) (*step.File, error) {
	if splatfile.IsSOGFolder(j.Path) {
		// Its content is the bundle built in the state directory.
		f, err := os.Open(s.bundlePath(j.Path))
		if err != nil {
			return nil, fileError(err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		return &step.File{F: f, Info: fi, Want: j.SHA256, Size: j.Size}, nil
	}
	open := s.env.FS.OpenRegular
	if s.follows(j.Root) {
		open = s.env.FS.OpenRegularFollow
	}
	f, fi, err := open(j.Root, j.Path)
	if err != nil {
		return nil, fileError(err)
	}
	return &step.File{F: f, Info: fi, Want: j.SHA256, Size: j.Size}, nil
}

// fileError wraps what retrying cannot fix (gone, not regular, out of the
// folder) as a *step.FileError; other errors are returned as they are.
func fileError(err error) error {
	var nr *trustfs.NotRegularError
	var esc *trustfs.EscapeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &step.FileError{Err: fmt.Errorf("file is gone: %w", err)}
	case errors.As(err, &nr), errors.As(err, &esc):
		return &step.FileError{Err: err}
	}
	return err
}

// openFiles keeps each job's descriptor from its hash to its upload, at
// most maxHeld at a time (the oldest is closed beyond that: its job opens
// the file again, and finds it the same or hashes again).
type openFiles struct {
	mu    sync.Mutex
	files map[uint64]*step.File
	order []uint64
}

const maxHeld = 64

func (h *openFiles) put(id uint64, jf *step.File) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.files == nil {
		h.files = make(map[uint64]*step.File)
	}
	if old := h.files[id]; old != nil {
		old.Close()
	} else {
		h.order = append(h.order, id)
	}
	h.files[id] = jf
	for len(h.order) > maxHeld {
		oldest := h.order[0]
		h.order = h.order[1:]
		if f := h.files[oldest]; f != nil {
			f.Close()
			delete(h.files, oldest)
		}
	}
}

// take hands j's kept descriptor to the caller (nil when none).
func (h *openFiles) take(id uint64) *step.File {
	h.mu.Lock()
	defer h.mu.Unlock()
	jf := h.files[id]
	if jf != nil {
		delete(h.files, id)
		for i, o := range h.order {
			if o == id {
				h.order = append(h.order[:i], h.order[i+1:]...)
				break
			}
		}
	}
	return jf
}

// drop closes j's kept descriptor, if any.
func (h *openFiles) drop(id uint64) {
	if jf := h.take(id); jf != nil {
		jf.Close()
	}
}

// closeAll closes every kept descriptor (the pool stops).
func (h *openFiles) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, jf := range h.files {
		jf.Close()
	}
	h.files, h.order = nil, nil
}

// UploadFile returns j's descriptor for its upload: the one kept since its
// hash, or the file opened again. changed is the file's new stat when it
// is no longer the one hashed (the caller sends the job back); then no
// file is returned.
func (s *Source) UploadFile(j state.Job) (jf *step.File, changed fs.FileInfo, err error) {
	jf = s.open.take(j.ID)
	if jf == nil {
		if jf, err = s.openJob(j); err != nil {
			return nil, nil, err
		}
	}
	fi, err := jf.Restat()
	if err != nil {
		jf.Close()
		return nil, nil, err
	}
	if !step.IsRecorded(fi, j) {
		jf.Close()
		return nil, fi, nil
	}
	// The name may since point at another file: the kept descriptor is
	// still what was hashed, but the job follows the name (a file renamed
	// over it is a new version, hashed again).
	cur, err := s.CheckName(j)
	if err != nil {
		jf.Close()
		return nil, nil, err
	}
	if !os.SameFile(cur, fi) {
		jf.Close()
		return nil, cur, nil
	}
	if j.Encoded == nil {
		// Held since the check, jf was opened before the hash: what the
		// upload must read is what the job has recorded since.
		jf.Want, jf.Size = j.SHA256, j.Size
		return jf, nil, nil
	}
	// The file is still the one hashed, so its encoding is still its
	// content's: that is what is sent (read from one descriptor, its own
	// sha256 checked as it streams). A lost encoding (state_dir cleaned)
	// reports the file as changed, so that the job is checked and encoded
	// again.
	jf.Close()
	enc, err := os.Open(j.Encoded.Path)
	if err != nil {
		return nil, fi, nil
	}
	efi, err := enc.Stat()
	if err != nil || !efi.Mode().IsRegular() || efi.Size() != j.Encoded.Size {
		enc.Close()
		return nil, fi, nil
	}
	return &step.File{F: enc, Info: efi, Want: j.Encoded.SHA256, Size: j.Encoded.Size, Encoded: true}, nil, nil
}

// CheckName stats j's path through its watch folder and requires a
// regular file (the stage checks before and after an upload).
func (s *Source) CheckName(j state.Job) (fs.FileInfo, error) {
	if splatfile.IsSOGFolder(j.Path) {
		fi, err := os.Stat(s.bundlePath(j.Path))
		if err != nil {
			return nil, fileError(err)
		}
		return fi, nil
	}
	stat := s.env.FS.StatRegular
	if s.follows(j.Root) {
		stat = s.env.FS.StatFollow
	}
	fi, err := stat(j.Root, j.Path)
	if err != nil {
		return nil, fileError(err)
	}
	return fi, nil
}

// follows reports whether the watch folder root follows symbolic links
// (follow_symlinks).
func (s *Source) follows(root string) bool {
	return s.env.Files().FollowSymlinks(root)
}
