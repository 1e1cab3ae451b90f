package after

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher/trustfs"
)

// errFileGone: the file to move is neither where it was nor at its target.
var errFileGone = errors.New("file is gone")

// moveUnder moves file to the same relative place under dest (relative to
// root), never overwriting: a taken name gets ".1", ".2", … before its
// extension. It moves the open file the job read (seen, when known), calls
// place with the chosen name before anything is linked there (its error
// stops the move), takes a regular sidecar along, and finishes what a crash
// left of an earlier run (docs/durability.md).
func moveUnder(fsys *trustfs.FS, file, root, dest string, seen seenFile, place func(target string) error) (string, error) {
	target := moveTarget(file, root, dest)
	if err := fsys.MkdirDurable(dest, filepath.Dir(target), 0o755); err != nil {
		return file, err
	}
	f, fi, err := fsys.OpenRegular(root, file)
	if errors.Is(err, fs.ErrNotExist) {
		if moved := movedTo(target, seen); moved != "" {
			moveSidecar(fsys, root, file, moved) // a crash may have come before it went
			return moved, nil
		}
		if r, rerr := readReceiptIn(fsys, dest, target); rerr == nil && seen.Job != 0 && r.Job == seen.Job {
			return file, fmt.Errorf("%w: neither here nor at %s, where its receipt is (lost at a power cut, or removed by hand): %w",
				errFileGone, target, err)
		}
		return file, fmt.Errorf("%w: %w", errFileGone, err)
	}
	if err != nil {
		return file, err
	}
	defer f.Close()
	if seen.ID != (trustfs.ID{}) && trustfs.IDOf(fi) != seen.ID {
		return file, &trustfs.ReplacedError{Path: file}
	}
	for p, lfi := range taken(target) {
		if leftOf(p, lfi, fi, seen) {
			if err := os.Remove(p); err != nil {
				return file, err
			}
			break
		}
	}
	target = freeName(target)
	if err := place(target); err != nil {
		return file, err
	}
	if err := moveOpen(fsys, root, file, f, fi, target); err != nil {
		return file, err
	}
	moveSidecar(fsys, root, file, target)
	return target, nil
}

// moveSidecar moves file's sidecar, when it is a regular file, beside its
// file moved to target.
func moveSidecar(fsys *trustfs.FS, root, file, target string) {
	if sf, sfi, err := fsys.OpenRegular(root, sidecar.Path(file)); err == nil {
		_ = moveOpen(fsys, root, sidecar.Path(file), sf, sfi, freeName(sidecar.Path(target)))
		sf.Close()
	}
}

// seenFile is the file a job read, by which a move knows it again: its ID,
// and for a copy across filesystems, which has another, the receipt written
// at its name for the job (Job, SHA256), or without one its size and
// modification time (a copy keeps both).
type seenFile struct {
	trustfs.ID
	Size    int64
	ModTime time.Time
	Job     uint64
	SHA256  string
}

// movedTo is where a move before a crash put the file whose name is gone:
// the one of target, target.1, … (the names freeName tries, as long as they
// exist) that is the seen file, or its copy (the copy's mark still linked to
// it, or copyOf), else "". A copy's mark left unlinked (a copy a crash
// stopped, whose source went another way) is removed. A job that knows no
// ID (recorded before IDs were) takes target when it exists.
func movedTo(target string, seen seenFile) string {
	if seen.ID == (trustfs.ID{}) {
		if exists(target) {
			return target
		}
		return ""
	}
	mark := copyMark(target, seen.ID)
	mfi, markErr := os.Lstat(mark)
	for p, fi := range taken(target) {
		switch {
		case trustfs.IDOf(fi) == seen.ID:
			return p
		case markErr == nil && os.SameFile(mfi, fi): // copied, the source removed, the mark not yet
			_ = os.Remove(mark)
			return p
		case copyOf(p, fi, seen.Size, seen.ModTime, seen):
			return p
		}
	}
	if markErr == nil {
		_ = os.Remove(mark)
	}
	return ""
}

// leftOf says p (lfi) is what a move of src (the open source, seen) that a
// crash stopped left there before it removed src: src itself, linked, or
// its copy, with the copy's mark still linked to it and copyOf it. The
// mark alone is not enough: src's inode number is free again once a move
// removed it, and a new file may have it.
func leftOf(p string, lfi, src fs.FileInfo, seen seenFile) bool {
	if os.SameFile(src, lfi) {
		return true
	}
	mfi, err := os.Lstat(copyMark(p, trustfs.IDOf(src)))
	return err == nil && os.SameFile(mfi, lfi) && copyOf(p, lfi, src.Size(), src.ModTime(), seen)
}

// copyOf says the regular file p (fi) is the copy of a file of size and
// modification time mod that held's job moved: the receipt at p is the
// job's, or, with none there (receipts off), p has that size and time.
func copyOf(p string, fi fs.FileInfo, size int64, mod time.Time, seen seenFile) bool {
	if !fi.Mode().IsRegular() {
		return false
	}
	r, err := ReadReceipt(p)
	if errors.Is(err, ErrNoReceipt) {
		return fi.Size() == size && fi.ModTime().Equal(mod)
	}
	return err == nil && seen.Job != 0 && r.Job == seen.Job && r.SHA256 == seen.SHA256
}

// copyMark is the hidden second name a copy of the file src (its ID) into
// dst's folder keeps until src is removed: a crash in between leaves it,
// linked to the copy, so the next run knows the copy for src's. Its length
// does not depend on dst's name.
func copyMark(dst string, src trustfs.ID) string {
	return filepath.Join(filepath.Dir(dst), fmt.Sprintf("%s%d-%d", copyMarkPrefix, src.Dev, src.Ino))
}

const copyMarkPrefix = ".splatd-copy-"

// moveTarget is where moveUnder first tries to put file: its path under
// root (its base name when it lies outside root) below dest. A taken name
// makes it pick numbered(target, 1), numbered(target, 2), … instead.
func moveTarget(file, root, dest string) string {
	rel := filepath.Base(file)
	if root != "" {
		if r, in := trustfs.Within(root, file); in {
			rel = r
		}
	}
	return filepath.Join(dest, rel)
}

// existsIn reports whether path exists (as any kind of file) under root.
func existsIn(fsys *trustfs.FS, root, path string) bool {
	_, err := fsys.Lstat(root, path)
	return err == nil
}

// freeName is the first of p, p.1, … (numbered) that does not exist.
func freeName(p string) string {
	n := 0
	for range taken(p) {
		n++
	}
	if n == 0 {
		return p
	}
	return numbered(p, n)
}

// taken yields target, target.1, … (numbered) with their Lstat, as long as
// they exist: the names a move may have used for a file, in the order
// freeName picks them.
func taken(target string) iter.Seq2[string, fs.FileInfo] {
	return func(yield func(string, fs.FileInfo) bool) {
		for i, p := 0, target; ; i, p = i+1, numbered(target, i+1) {
			fi, err := os.Lstat(p)
			if err != nil || !yield(p, fi) {
				return
			}
		}
	}
}

// numbered is p's i-th other name, as freeName picks it: ".i" before its
// extension (scan.ply: scan.1.ply).
func numbered(p string, i int) string {
	ext := filepath.Ext(p)
	return fmt.Sprintf("%s.%d%s", strings.TrimSuffix(p, ext), i, ext)
}

// moveOpen moves src (open as f, under root) to dst without ever leaving
// two copies or replacing an existing dst: it links the open file to dst,
// or across filesystems (EXDEV, or no links allowed) copies it to its mark
// beside dst and links that, then removes src, each step durable before
// the next (docs/durability.md). When src cannot be removed (a folder the
// daemon may not write, an immutable file), dst is removed again: a
// half-done move would otherwise copy the file once more at every retry.
func moveOpen(fsys *trustfs.FS, root, src string, f *os.File, fi fs.FileInfo, dst string) error {
	err := linkTo(f, dst)
	if err != nil && !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) &&
		!errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	mark := ""
	if err == nil {
		fsys.Note("link", dst)
		if err := fsys.SyncDir(filepath.Dir(dst)); err != nil {
			return errors.Join(err, os.Remove(dst))
		}
	} else {
		mark = copyMark(dst, trustfs.IDOf(fi))
		if err := copyOpen(fsys, f, fi, mark, dst); err != nil {
			return err
		}
	}
	if err := removeSource(fsys, root, src, trustfs.IDOf(fi)); err != nil {
		if mark != "" {
			_ = os.Remove(mark)
		}
		if rerr := os.Remove(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("cannot remove the source (%w) nor the copy %s (%v): remove one by hand", err, dst, rerr)
		}
		return fmt.Errorf("cannot remove the source, so the copy at %s was removed again: %w", dst, err)
	}
	if mark != "" && os.Remove(mark) == nil {
		_ = fsys.SyncDir(filepath.Dir(dst)) // a mark back after a cut is litter only
	}
	return nil
}

// linkTo is linkOpen; tests replace it to stop a move before its file
// reaches the target.
var linkTo = linkOpen

// removeSource removes a moved or deleted file's name in its folder when
// it still names that file; tests replace it to make a source unremovable,
// or to look at the folders as the file leaves.
var removeSource = (*trustfs.FS).RemoveIf

// copyOpen copies the open regular file f to mark with f's mode and
// modification time, fsynced, and links it to dst, fsyncing dst's folder:
// dst never exists half-written, and is on disk before the source goes. A
// mark left by a copy a crash stopped is replaced.
func copyOpen(fsys *trustfs.FS, f *os.File, fi fs.FileInfo, mark, dst string) error {
	if err := os.Remove(mark); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp, err := os.OpenFile(mark, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600) // O_EXCL: never through a link planted there
	if err != nil {
		return err
	}
	fsys.Note("create", mark)
	err = func() error {
		defer tmp.Close()
		if _, err := io.Copy(tmp, io.NewSectionReader(f, 0, fi.Size())); err != nil {
			return err
		}
		if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
			return err
		}
		if err := os.Chtimes(mark, time.Time{}, fi.ModTime()); err != nil { // as a link keeps it
			return err
		}
		return fsys.SyncFile(tmp, mark)
	}()
	if err == nil {
		err = os.Link(mark, dst)
		if err == nil {
			fsys.Note("link", dst)
			if err = fsys.SyncDir(filepath.Dir(dst)); err != nil {
				err = errors.Join(err, os.Remove(dst))
			}
		}
	}
	if err != nil {
		return errors.Join(err, os.Remove(mark))
	}
	return nil
}
