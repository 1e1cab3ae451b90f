package sidecar

import (
	"errors"
	"github.com/splatd/splatd/watcher/trustfs"
	"io/fs"
	"path/filepath"
	"strings"
)

// FolderName is the file of folder settings: the keys of a sidecar
// (title, description, listed, format, settings, encode), applied to every file in
// its folder and below, up to the watch root. Its title is a template, like
// publish.title. Its leading dot keeps it from ever being a candidate.
const FolderName = ".splat.yaml"

// folderFile is one folder's settings, with the path its errors name.
type folderFile struct {
	path string
	o    Overrides
}

// readFolders reads the folder settings that apply to path, outermost
// first: every FolderName from root down to path's own folder, so that the
// nearest is laid last and wins. Without a root (a one-shot publish), or
// for a path outside it, only the file's own folder is looked at.
func readFolders(fsys *trustfs.FS, path, root string) ([]folderFile, error) {
	dir := filepath.Dir(path)
	dirs := []string{dir}
	within := "" // the folder the settings are read through (os.Root)
	if root != "" {
		if rel, err := filepath.Rel(root, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			dirs, within = []string{filepath.Clean(root)}, root
			if rel != "." {
				at := filepath.Clean(root)
				for _, part := range strings.Split(rel, string(filepath.Separator)) {
					at = filepath.Join(at, part)
					dirs = append(dirs, at)
				}
			}
		}
	}
	var out []folderFile
	for _, d := range dirs {
		p := filepath.Join(d, FolderName)
		o, err := read(fsys, within, p, "folder settings "+p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, folderFile{path: p, o: o})
	}
	return out, nil
}
