package after

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// An unbundled SOG folder's job is its meta.json, but its after-actions
// act on the folder: meta.json and every image it names move or go
// together (splatfile.SOGFolderFiles), meta.json last, so that a crash in
// between leaves the job's handle where it was and the action is simply
// tried again; other files in the folder stay. A moved folder's sidecar
// (FOLDER.splat.yaml, splatfile.FolderAsFile) travels with it, and the
// folder left empty by a move is removed, unless it is the watch folder
// itself. A deleted folder keeps its receipt, as a deleted file does.

// moveFolderUnder moves the SOG folder of meta to the same relative place
// under dest: the first of FOLDER, FOLDER.1, … there that holds no
// meta.json (one that an interrupted move filled in part is used again),
// file by file, never overwriting. place is called with where meta.json
// will be before the first file moves (moveUnder says why; its error stops
// the move). It returns where meta.json now is.
func moveFolderUnder(fsys *trustfs.FS, meta, root, dest string, place func(target string) error) (string, error) {
	dir := filepath.Dir(meta)
	base := moveFolderTarget(meta, root, dest)
	names, err := folderFiles(fsys, root, dir)
	if errors.Is(err, fs.ErrNotExist) {
		// meta.json is gone: moved before a crash (it goes last), or
		// removed by its owner.
		if moved := lastWithMeta(base); moved != "" {
			return moved, nil
		}
		return meta, fmt.Errorf("%w: %w", errFileGone, err)
	}
	if err != nil {
		return meta, err
	}
	target := base
	for i := 1; exists(filepath.Join(target, splatfile.SOGMeta)); i++ {
		target = fmt.Sprintf("%s.%d", base, i)
	}
	if err := fsys.MkdirDurable(dest, target, 0o755); err != nil {
		return meta, err
	}
	if err := place(filepath.Join(target, splatfile.SOGMeta)); err != nil {
		return meta, err
	}
	for _, name := range names {
		if err := moveFolderFile(fsys, root, filepath.Join(dir, name), filepath.Join(target, name)); err != nil {
			return meta, err
		}
	}
	removeCopyMarks(target)
	sc := sidecar.Path(splatfile.FolderAsFile(root, meta))
	if f, fi, err := fsys.OpenRegular(root, sc); err == nil {
		_ = moveOpen(fsys, root, sc, f, fi, freeName(sidecar.Path(target+".sog")))
		f.Close()
	}
	if root == "" || filepath.Clean(dir) != filepath.Clean(root) {
		_ = fsys.RemoveEmptyDir(root, dir) // other files may stay in it
	}
	return filepath.Join(target, splatfile.SOGMeta), nil
}

// moveFolderFile moves src (under root) to dst, never overwriting but a
// copy a crash left there; a src already gone is no error.
func moveFolderFile(fsys *trustfs.FS, root, src, dst string) error {
	f, fi, err := fsys.OpenRegular(root, src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // moved before a crash, or never there
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if lfi, lerr := os.Lstat(dst); lerr == nil && leftOf(dst, lfi, fi, seenFile{}) {
		// Left by a crash before its source was removed: moved again.
		if err := os.Remove(dst); err != nil {
			return err
		}
	}
	return moveOpen(fsys, root, src, f, fi, dst)
}

// removeCopyMarks removes from target the marks of copies whose sources a
// crash removed (moveOpen): litter once every file is there.
func removeCopyMarks(target string) {
	ents, err := os.ReadDir(target)
	if err != nil {
		return
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), copyMarkPrefix) {
			_ = os.Remove(filepath.Join(target, e.Name()))
		}
	}
}

// moveFolderTarget is the folder under dest where moveFolderUnder first
// tries to put meta's SOG folder: its path under root below dest (its base
// name when it is root itself or lies outside). A folder already holding a
// meta.json makes it pick BASE.1, BASE.2, … instead.
func moveFolderTarget(meta, root, dest string) string {
	dir := filepath.Dir(meta)
	rel := filepath.Base(dir)
	if root != "" {
		if r, in := trustfs.Within(root, dir); in && r != "." {
			rel = r
		}
	}
	return filepath.Join(dest, rel)
}

// removeFolder removes the SOG folder of meta's files, meta.json last, and
// its sidecar; the folder itself stays, with its receipt.
func removeFolder(fsys *trustfs.FS, meta, root string) error {
	dir := filepath.Dir(meta)
	names, err := folderFiles(fsys, root, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed before a crash (meta.json goes last)
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := removeSource(fsys, root, filepath.Join(dir, name), trustfs.ID{}); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	_ = fsys.RemoveIf(root, sidecar.Path(splatfile.FolderAsFile(root, meta)), trustfs.ID{})
	return nil
}

// folderFiles lists the SOG folder dir's files (splatfile.SOGFolderFiles),
// reading it through the watch folder root.
func folderFiles(fsys *trustfs.FS, root, dir string) ([]string, error) {
	d, err := fsys.OpenDir(root, dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return splatfile.SOGFolderFiles(d)
}

// lastWithMeta is the meta.json of the last of base, base.1, … that holds
// one ("" if none does): where a move interrupted after its last step put
// the folder.
func lastWithMeta(base string) string {
	found := ""
	for i, p := 0, base; exists(p); i, p = i+1, fmt.Sprintf("%s.%d", base, i+1) {
		if m := filepath.Join(p, splatfile.SOGMeta); exists(m) {
			found = m
		}
	}
	return found
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
