// Package trustfs is the one way splatd touches a file under a watch folder.
// A watch folder is untrusted input: anyone who may write to it may put a
// link, a named pipe or a device where a file was, or swap a subfolder for
// a link to elsewhere. Every access goes through an os.Root on the watch
// folder (opened through the outermost watch folder holding it), so no
// path, link or ".." leads out of it; the last component of a path is never
// followed, files are opened non-blocking, and small files are read with a
// size cap. docs/architecture.md ("Trust boundary") says why.
//
// Methods of FS take the watch folder (root) and an absolute path under it.
// An empty root means the path's own folder: a file named on the command
// line is still opened without following a link at its last component.
package trustfs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// SmallMax is the size cap of the small files splatd reads from a watch
// folder: sidecars, folder settings (.splat.yaml) and receipts.
const SmallMax = 64 << 10

// KindOf names what a mode is when it is not a regular file ("" when it is).
func KindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeDevice != 0 || m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file (" + m.Type().String() + ")"
}

// ID identifies a file (its device and inode).
type ID struct{ Dev, Ino uint64 }

// Within returns path relative to root, and whether path is root or lies
// below it, by name alone (links are not looked at). A name that only
// begins with two dots ("..done") is below.
func Within(root, path string) (string, bool) {
	rel, err := filepath.Rel(root, path)
	return rel, err == nil && filepath.IsLocal(rel)
}

// OpenRoot opens the watch folder root as an os.Root: through the outermost
// watch folder that holds it, if any, so that no link between the two leads
// out of that folder (an *EscapeError).
func (t *FS) OpenRoot(root string) (*os.Root, error) {
	root = filepath.Clean(root)
	outer := t.outerOf(root)
	if outer == "" {
		return os.OpenRoot(root)
	}
	o, err := os.OpenRoot(outer)
	if err != nil {
		return nil, err
	}
	defer o.Close()
	rel, _ := Within(outer, root)
	r, err := o.OpenRoot(rel)
	if err != nil {
		return nil, classify(err, root, outer)
	}
	return r, nil
}

// open opens root (path's own folder when root is "") as an os.Root and
// returns path relative to it. A path outside root is an *EscapeError.
func (t *FS) open(root, path string) (*os.Root, string, error) {
	if root == "" {
		root = filepath.Dir(path)
	}
	rel, ok := Within(root, path)
	if !ok || rel == "." {
		_, err := filepath.Rel(root, path)
		return nil, "", &EscapeError{Path: path, Root: root, Err: err}
	}
	r, err := t.OpenRoot(root)
	if err != nil {
		return nil, "", err
	}
	return r, rel, nil
}

// classify turns an os.Root error into an *EscapeError when it says the
// path escapes the root, and into a *NameTooLongError for ENAMETOOLONG.
func classify(err error, path, root string) error {
	if errors.Is(err, syscall.ENAMETOOLONG) {
		return &NameTooLongError{Path: path}
	}
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		if root == "" {
			root = filepath.Dir(path)
		}
		return &EscapeError{Path: path, Root: root, Err: err}
	}
	return err
}

// Lstat stats path under root without following a link at its last
// component (links in between are followed only while they stay inside).
func (t *FS) Lstat(root, path string) (fs.FileInfo, error) {
	r, rel, err := t.open(root, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	return fi, classify(err, path, root)
}

// LstatRoot stats the watch folder root itself without following a link
// at its name: through the outermost watch folder holding it, else by its
// own path (the operator's).
func (t *FS) LstatRoot(root string) (fs.FileInfo, error) {
	root = filepath.Clean(root)
	if outer := t.outerOf(root); outer != "" {
		return t.Lstat(outer, root)
	}
	return os.Lstat(root)
}

// StatRegular is Lstat that also requires a regular file.
func (t *FS) StatRegular(root, path string) (fs.FileInfo, error) {
	fi, err := t.Lstat(root, path)
	if err != nil {
		return nil, err
	}
	if k := KindOf(fi.Mode()); k != "" {
		return nil, &NotRegularError{Path: path, Kind: k}
	}
	return fi, nil
}

// OpenRegular opens path under root for reading: never through a link at
// its last component nor out of root, non-blocking (a pipe cannot hang
// the caller), and only when it is a regular file (checked on the open
// descriptor). It returns the file and its fstat.
func (t *FS) OpenRegular(root, path string) (*os.File, fs.FileInfo, error) {
	r, rel, err := t.open(root, path)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	return openIn(r, rel, root, path)
}

// OpenIn is OpenRegular of name in the folder r, already open as an
// os.Root (a folder of files read together, such as an unbundled SOG).
func OpenIn(r *os.Root, name string) (*os.File, fs.FileInfo, error) {
	return openIn(r, name, "", name)
}

// KindReplaced is the Kind of a *NotRegularError for a name swapped for
// another file (a link inside the folder) while it was opened.
const KindReplaced = "replaced while it was opened (a symbolic link?)"

// openIn is OpenRegular of rel in r, naming path (under root) in errors.
func openIn(r *os.Root, rel, root, path string) (*os.File, fs.FileInfo, error) {
	lfi, err := r.Lstat(rel)
	if err != nil {
		return nil, nil, classify(err, path, root)
	}
	if k := KindOf(lfi.Mode()); k != "" {
		return nil, nil, &NotRegularError{Path: path, Kind: k}
	}
	f, fi, err := openChecked(r, rel, root, path)
	if err != nil {
		return nil, nil, err
	}
	if !os.SameFile(lfi, fi) {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Kind: KindReplaced}
	}
	return f, fi, nil
}

// ReadSmall reads a small regular file under root, at most max bytes: a
// larger one is a *TooLargeError, a link, pipe or device a
// *NotRegularError, a missing one fs.ErrNotExist.
func (t *FS) ReadSmall(root, path string, max int64) ([]byte, error) {
	f, fi, err := t.OpenRegular(root, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, &TooLargeError{Path: path, Max: max}
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, &TooLargeError{Path: path, Max: max}
	}
	return b, nil
}

// RemoveEmptyDir removes the folder dir under root when it is empty, then
// fsyncs its parent; a link there is left alone (an error), and so is a
// folder that is not empty (an error too).
func (t *FS) RemoveEmptyDir(root, dir string) error {
	r, rel, err := t.open(root, dir)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	if err != nil {
		return classify(err, dir, root)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a folder", dir)
	}
	if err := r.Remove(rel); err != nil {
		return classify(err, dir, root)
	}
	t.note("rmdir", dir)
	return t.syncIn(r, filepath.Dir(rel), filepath.Dir(dir))
}

// RemoveIf removes path under root (the name, never what a link names)
// when it is still the file want identifies (any non-folder when want is
// zero), then fsyncs its folder: the removal is durable when it returns. A
// path already gone is fs.ErrNotExist; another file there is a
// *ReplacedError and stays.
func (t *FS) RemoveIf(root, path string, want ID) error {
	r, rel, err := t.open(root, path)
	if err != nil {
		return err
	}
	defer r.Close()
	fi, err := r.Lstat(rel)
	if err != nil {
		return classify(err, path, root)
	}
	if fi.IsDir() {
		return &NotRegularError{Path: path, Kind: "a directory"}
	}
	if want != (ID{}) && IDOf(fi) != want {
		return &ReplacedError{Path: path}
	}
	if err := r.Remove(rel); err != nil {
		return classify(err, path, root)
	}
	t.note("unlink", path)
	return t.syncIn(r, filepath.Dir(rel), filepath.Dir(path))
}

// WriteAtomic writes data to path under root: a temp file created (never
// through a link) in the same folder, fsynced, renamed over path, then the
// folder fsynced, so that path holds the old data or the new after a power
// cut, and the new once it returns. A link at path is replaced, never
// written through.
func (t *FS) WriteAtomic(root, path string, data []byte, perm fs.FileMode) error {
	r, rel, err := t.open(root, path)
	if err != nil {
		return err
	}
	defer r.Close()
	dir, _ := filepath.Split(rel)
	var tmp string
	var f *os.File
	for i := 0; ; i++ {
		// Not derived from base: a name near the file system's limit
		// must not fail for the temporary name alone.
		tmp = filepath.Join(dir, fmt.Sprintf(".splatd-tmp-%016x", rand.Uint64()))
		f, err = r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i >= 100 {
			return classify(err, path, root)
		}
	}
	tmpPath := filepath.Join(filepath.Dir(path), filepath.Base(tmp))
	t.note("create", tmpPath)
	defer r.Remove(tmp) // harmless after the rename
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if err := t.SyncFile(f, tmpPath); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := r.Rename(tmp, rel); err != nil {
		return classify(err, path, root)
	}
	t.note("rename", path)
	return t.syncIn(r, filepath.Clean(dir+"."), filepath.Dir(path))
}

// openChecked opens rel in r for reading, non-blocking, and requires a
// regular file on the open descriptor (fstat).
func openChecked(r *os.Root, rel, root, path string) (*os.File, fs.FileInfo, error) {
	f, err := r.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, classify(err, path, root)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if k := KindOf(fi.Mode()); k != "" {
		f.Close()
		return nil, nil, &NotRegularError{Path: path, Kind: k}
	}
	return f, fi, nil
}

// OpenRegularFollow is OpenRegular for a watch folder that follows
// symbolic links (follow_symlinks): a link at the last component is
// followed while it stays inside root; what it names must be a regular
// file.
func (t *FS) OpenRegularFollow(root, path string) (*os.File, fs.FileInfo, error) {
	r, rel, err := t.open(root, path)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	sfi, err := r.Stat(rel)
	if err != nil {
		return nil, nil, classify(err, path, root)
	}
	if k := KindOf(sfi.Mode()); k != "" {
		return nil, nil, &NotRegularError{Path: path, Kind: k}
	}
	f, fi, err := openChecked(r, rel, root, path)
	if err != nil {
		return nil, nil, err
	}
	return f, fi, nil
}

// StatFollow is Stat of path under root, following links that stay
// inside it, and requires a regular file.
func (t *FS) StatFollow(root, path string) (fs.FileInfo, error) {
	r, rel, err := t.open(root, path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	if err != nil {
		return nil, classify(err, path, root)
	}
	if k := KindOf(fi.Mode()); k != "" {
		return nil, &NotRegularError{Path: path, Kind: k}
	}
	return fi, nil
}

// Hash returns the hex sha256 of f's content, read from offset 0 (whatever
// f's position), checking ctx between reads: the one file hash of splatd,
// for a job's content, a receipt's evidence and the dry run alike.
func Hash(ctx context.Context, f *os.File) (string, error) { return HashTo(ctx, f, nil) }

// HashTo is Hash that also writes every chunk it hashes to also (nil: none),
// on the same pass: a progress counter sees the bytes hashed without a
// second read. An error from also ends the hash with that error.
func HashTo(ctx context.Context, f *os.File, also io.Writer) (string, error) {
	r := io.NewSectionReader(f, 0, 1<<62)
	h := sha256.New()
	buf := make([]byte, readBuf(f))
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, err := r.Read(buf)
		h.Write(buf[:n])
		if also != nil && n > 0 {
			if _, werr := also.Write(buf[:n]); werr != nil {
				return "", werr
			}
		}
		if err == io.EOF {
			return hex.EncodeToString(h.Sum(nil)), nil
		}
		if err != nil {
			return "", err
		}
	}
}

// readBuf is the read buffer's size for f: a MiB, or less for a smaller
// file (a folder of small files would churn a MiB each).
func readBuf(f *os.File) int {
	if fi, err := f.Stat(); err == nil && fi.Size() < 1<<20 {
		return int(max(fi.Size()+1, 4<<10))
	}
	return 1 << 20
}

// OpenDir opens the folder dir under root as an os.Root of its own (a
// folder of files that belong together, such as an unbundled SOG): no path
// or link from root to dir leads out of root, and nothing opened through
// the result leads out of dir.
func (t *FS) OpenDir(root, dir string) (*os.Root, error) {
	if root == "" {
		return os.OpenRoot(dir)
	}
	if filepath.Clean(root) == filepath.Clean(dir) {
		return t.OpenRoot(dir)
	}
	r, rel, err := t.open(root, dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	d, err := r.OpenRoot(rel)
	if err != nil {
		return nil, classify(err, dir, root)
	}
	return d, nil
}
