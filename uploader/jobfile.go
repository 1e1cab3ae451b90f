package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// A job's content is read from one descriptor, from its hash to its upload,
// and what is sent is hashed again against the recorded sha256
// (docs/architecture.md, "One open, one hash"). Another source (an
// encoding, a bundled folder) plugs in at openJob as a *jobFile.

// jobFile is the content a job uploads, open: its own file, or the
// encoding made of it (publish.encode) in the state directory.
type jobFile struct {
	f  *os.File
	fi fs.FileInfo // fstat when opened (or last checked)
	// want and size are what the upload must read: the job's sha256 and
	// size, or its encoding's.
	want    string
	size    int64
	encoded bool
}

// errContentChanged: the bytes read for the upload do not hash to the
// recorded sha256.
var errContentChanged = errors.New("content changed since it was hashed")

// openJob opens j's file through its watch folder. A missing file, a link
// (unless the folder follows links, and then only one that stays inside),
// a pipe, a device or a path out of the folder is a *workerFileError (the
// job fails with it).
func (p *Pool) openJob(j state.Job) (*jobFile, error) {
	if splatfile.IsSOGFolder(j.Path) {
		// Its content is the bundle built in the state directory.
		f, err := os.Open(p.bundlePath(j.Path))
		if err != nil {
			return nil, fileError(err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		return &jobFile{f: f, fi: fi, want: j.SHA256, size: j.Size}, nil
	}
	open := p.fs.OpenRegular
	if p.follows(j.Root) {
		open = p.fs.OpenRegularFollow
	}
	f, fi, err := open(j.Root, j.Path)
	if err != nil {
		return nil, fileError(err)
	}
	return &jobFile{f: f, fi: fi, want: j.SHA256, size: j.Size}, nil
}

// unchanged reports whether fi (a restat of jf) is still what jf was opened
// for: the job's file as hashed, or its encoding at its recorded size.
func (jf *jobFile) unchanged(fi fs.FileInfo, j state.Job) bool {
	if jf.encoded {
		return fi.Size() == jf.size
	}
	return isRecordedFile(fi, j)
}

// fileError wraps what retrying cannot fix (gone, not regular, out of the
// folder) as a *workerFileError; other errors are returned as they are.
func fileError(err error) error {
	var nr *trustfs.NotRegularError
	var esc *trustfs.EscapeError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &workerFileError{fmt.Errorf("file is gone: %w", err)}
	case errors.As(err, &nr), errors.As(err, &esc):
		return &workerFileError{err}
	}
	return err
}

func (jf *jobFile) Close() error { return jf.f.Close() }

// restat refreshes the descriptor's fstat.
func (jf *jobFile) restat() (fs.FileInfo, error) {
	fi, err := jf.f.Stat()
	if err != nil {
		return nil, err
	}
	jf.fi = fi
	return fi, nil
}

// hash returns the sha256 of the descriptor's content, read from offset 0;
// every chunk hashed is also written to also (nil: none), a checkMeter.
func (jf *jobFile) hash(ctx context.Context, also io.Writer) (string, error) {
	return trustfs.HashTo(ctx, jf.f, also)
}

// isRecordedFile reports whether fi is the file j recorded: same size and mtime,
// and the same inode when j recorded one.
func isRecordedFile(fi fs.FileInfo, j state.Job) bool {
	if fi.Size() != j.Size || !fi.ModTime().Equal(j.ModTime) {
		return false
	}
	if j.Ino == 0 {
		return true
	}
	id := trustfs.IDOf(fi)
	return id.Dev == j.Dev && id.Ino == j.Ino
}

// verifyReader streams size bytes of f from offset 0 while hashing them;
// the read that would hand out the last bytes first compares the sum with
// want and, when it differs, hands out nothing and fails: the PUT never
// completes with content that is not the hashed one.
type verifyReader struct {
	r        io.Reader
	h        hash.Hash
	left     int64
	want     string
	mismatch bool
}

func newVerifyReader(f *os.File, size int64, want string) *verifyReader {
	return &verifyReader{r: io.NewSectionReader(f, 0, size), h: sha256.New(), left: size, want: want}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.mismatch {
		return 0, errContentChanged
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.left -= int64(n)
	if v.left <= 0 || err == io.EOF {
		if v.left != 0 || hex.EncodeToString(v.h.Sum(nil)) != v.want {
			v.mismatch = true
			return 0, errContentChanged
		}
	}
	return n, err
}

// openFiles keeps each job's descriptor from its hash to its upload, at
// most maxHeld at a time (the oldest is closed beyond that: its job opens
// the file again, and finds it the same or hashes again).
type openFiles struct {
	mu    sync.Mutex
	files map[uint64]*jobFile
	order []uint64
}

const maxHeld = 64

func (h *openFiles) put(id uint64, jf *jobFile) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.files == nil {
		h.files = make(map[uint64]*jobFile)
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
func (h *openFiles) take(id uint64) *jobFile {
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

// uploadFile returns j's descriptor for its upload: the one kept since its
// hash, or the file opened again. changed is the file's new stat when it
// is no longer the one hashed (the caller sends the job back); then no
// file is returned.
func (p *Pool) uploadFile(j state.Job) (jf *jobFile, changed fs.FileInfo, err error) {
	jf = p.open.take(j.ID)
	if jf == nil {
		if jf, err = p.openJob(j); err != nil {
			return nil, nil, err
		}
	}
	fi, err := jf.restat()
	if err != nil {
		jf.Close()
		return nil, nil, err
	}
	if !isRecordedFile(fi, j) {
		jf.Close()
		return nil, fi, nil
	}
	// The name may since point at another file: the kept descriptor is
	// still what was hashed, but the job follows the name (a file renamed
	// over it is a new version, hashed again).
	cur, err := p.checkName(j)
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
		jf.want, jf.size = j.SHA256, j.Size
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
	return &jobFile{f: enc, fi: efi, want: j.Encoded.SHA256, size: j.Encoded.Size, encoded: true}, nil, nil
}

// checkName stats j's path through its watch folder and requires a
// regular file (the stage checks before and after an upload).
func (p *Pool) checkName(j state.Job) (fs.FileInfo, error) {
	if splatfile.IsSOGFolder(j.Path) {
		fi, err := os.Stat(p.bundlePath(j.Path))
		if err != nil {
			return nil, fileError(err)
		}
		return fi, nil
	}
	stat := p.fs.StatRegular
	if p.follows(j.Root) {
		stat = p.fs.StatFollow
	}
	fi, err := stat(j.Root, j.Path)
	if err != nil {
		return nil, fileError(err)
	}
	return fi, nil
}

// follows reports whether the watch folder root follows symbolic links
// (follow_symlinks).
func (p *Pool) follows(root string) bool {
	return p.publish.Load().files.FollowSymlinks(root)
}

// v1Send sends the missing parts from the file, which must still be the
// one hashed, and moves the job to uploaded when all are stored. Beside
// the parts, the whole file is hashed again from the same descriptor the
// parts read: a sum that differs from the recorded one (the content
// changed, same size and mtime or not) sends the job back before
// complete, so what was hashed is what is published.
func (p *Pool) v1Send(ctx context.Context, t *pace.Caller, j state.Job, missing []int) (state.Job, error) {
	jf, changed, err := p.uploadFile(j)
	if err != nil {
		return j, err
	}
	if changed != nil {
		return p.workerChanged(j, changed, "file changed before its parts were sent; hashing again")
	}
	defer jf.Close()
	hctx, stopHash := context.WithCancel(ctx)
	defer stopHash()
	sum, want := make(chan error, 1), jf.want
	go func() {
		got, err := jf.hash(hctx, nil)
		if err == nil && got != want {
			err = errContentChanged
		}
		sum <- err
	}()
	start := p.o.Now()
	j, err = p.v1SendParts(ctx, t, j, jf.f, missing)
	if err != nil {
		return j, err
	}
	p.o.Client.PartsDone(p.o.Now().Sub(start))
	if err := <-sum; errors.Is(err, errContentChanged) {
		fi, serr := jf.restat()
		if serr != nil {
			return j, serr
		}
		return p.workerChanged(j, fi, "file content changed while its parts were sent (its sha256 differs from the one hashed); uploading again")
	} else if err != nil {
		return j, err
	}
	fi, err := jf.restat()
	if err != nil {
		return j, err
	}
	if !jf.unchanged(fi, j) {
		return p.workerChanged(j, fi, "file changed while its parts were sent; uploading again")
	}
	return p.v1Move(j, state.Uploaded, "")
}
