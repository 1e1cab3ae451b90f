package after

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher/trustfs"
)

// errFileGone: the file to move is neither where it was nor at its target.
var errFileGone = errors.New("file is gone")

// moveUnder moves file to the same relative place under dest (relative to
// root), never overwriting: a taken name gets ".1", ".2", … before its
// extension. The file is opened through its watch folder (trustfs: no link
// followed, regular files only) and must be the one the job read (held,
// when known); that open file is what is linked or copied. place is called
// with the name chosen, before anything is linked or copied there and so
// before the file leaves its place: Finish writes the receipt there, so
// that a fleet peer finds it as soon as the file is gone (an error from
// place stops the move). The sidecar travels with its file when it is a
// regular file (a link or a pipe stays where it is). A file already gone
// (moved by an earlier run of Finish) is looked for at its destination; a
// second name of the file left at the destination by a crash in the middle
// of a move (linked, its source not yet removed) is removed and the move
// runs again.
func moveUnder(file, root, dest string, held trustfs.ID, place func(target string) error) (string, error) {
	target := moveTarget(file, root, dest)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return file, err
	}
	f, fi, err := trustfs.OpenRegular(root, file)
	if errors.Is(err, fs.ErrNotExist) {
		if moved := movedTo(target, held); moved != "" {
			return moved, nil // moved before a crash; nothing left to do
		}
		return file, fmt.Errorf("%w: %w", errFileGone, err)
	}
	if err != nil {
		return file, err
	}
	defer f.Close()
	if held != (trustfs.ID{}) && trustfs.IDOf(fi) != held {
		return file, &trustfs.ReplacedError{Path: file}
	}
	if linked := sameFileAt(target, fi); linked != "" {
		if err := os.Remove(linked); err != nil {
			return file, err
		}
	}
	target = freeName(target)
	if err := place(target); err != nil {
		return file, err
	}
	if err := moveOpen(root, file, f, fi, target); err != nil {
		return file, err
	}
	if sf, sfi, err := trustfs.OpenRegular(root, sidecar.Path(file)); err == nil {
		_ = moveOpen(root, sidecar.Path(file), sf, sfi, freeName(sidecar.Path(target)))
		sf.Close()
	}
	return target, nil
}

// movedTo is where a move before a crash put the file whose name is gone:
// the one of target, target.1, … (the names freeName tries, as long as they
// exist) that is the held file, else target when it exists (a copy across
// filesystems is another file), else "".
func movedTo(target string, held trustfs.ID) string {
	if held != (trustfs.ID{}) {
		for i, p := 0, target; ; i, p = i+1, numbered(target, i+1) {
			fi, err := os.Lstat(p)
			if err != nil {
				break
			}
			if trustfs.IDOf(fi) == held {
				return p
			}
		}
	}
	if exists(target) {
		return target
	}
	return ""
}

// sameFileAt is the one of target, target.1, … (as long as they exist)
// that is the file fi itself, linked there by a move that a crash stopped
// before it removed the source ("" when none is).
func sameFileAt(target string, fi fs.FileInfo) string {
	for i, p := 0, target; ; i, p = i+1, numbered(target, i+1) {
		lfi, err := os.Lstat(p)
		if err != nil {
			return ""
		}
		if os.SameFile(fi, lfi) {
			return p
		}
	}
}

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
func existsIn(root, path string) bool {
	_, err := trustfs.Lstat(root, path)
	return err == nil
}

func freeName(p string) string {
	if _, err := os.Lstat(p); err != nil {
		return p
	}
	for i := 1; ; i++ {
		c := numbered(p, i)
		if _, err := os.Lstat(c); err != nil {
			return c
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
// two copies or replacing an existing dst. On one filesystem it links the
// open file itself to dst (a link refuses an existing name) and removes
// src's name, if it still names that file; across filesystems (EXDEV), or
// where links are not allowed, it copies the open file to a temp name in
// dst's folder with its mode, fsyncs, links that to dst and removes the
// temp name, then removes src. When src cannot be removed (a folder the
// daemon may not write, an immutable file), dst is removed again: a
// half-done move would otherwise copy the file once more at every retry and
// restart (ro1.ply, ro1.1.ply, …).
func moveOpen(root, src string, f *os.File, fi fs.FileInfo, dst string) error {
	err := linkTo(f, dst)
	if err != nil && !errors.Is(err, syscall.EXDEV) && !errors.Is(err, syscall.EPERM) &&
		!errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err != nil {
		if err := copyOpen(f, fi, dst); err != nil {
			return err
		}
	}
	if err := removeSource(root, src, trustfs.IDOf(fi)); err != nil {
		if rerr := os.Remove(dst); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			return fmt.Errorf("cannot remove the source (%w) nor the copy %s (%v): remove one by hand", err, dst, rerr)
		}
		return fmt.Errorf("cannot remove the source, so the copy at %s was removed again: %w", dst, err)
	}
	return nil
}

// linkTo is linkOpen; tests replace it to stop a move before its file
// reaches the target.
var linkTo = linkOpen

// removeSource removes a moved or deleted file's name in its folder when
// it still names that file; tests replace it to make a source unremovable,
// or to look at the folders as the file leaves.
var removeSource = trustfs.RemoveIf

// copyOpen copies the open regular file f to a temp name beside dst with
// f's mode, fsynced, and links it to dst; dst never exists half-written.
func copyOpen(f *os.File, fi fs.FileInfo, dst string) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the link, or on failure
	if _, err := io.Copy(tmp, io.NewSectionReader(f, 0, fi.Size())); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), dst)
}
