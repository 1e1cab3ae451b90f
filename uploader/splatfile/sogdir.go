package splatfile

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// An unbundled SOG is a folder holding meta.json and the WebP images it
// names, as splat-transform writes when its output is meta.json. The service
// takes one file, so such a folder is published as a bundled .sog built from
// it (BuildSOGBundle). The folder's meta.json is its handle: Check on a path
// whose base name is meta.json checks the folder.

// SOGMeta is the base name that marks an unbundled SOG folder.
const SOGMeta = "meta.json"

// IsSOGFolder reports whether path names an unbundled SOG folder's meta.json.
func IsSOGFolder(path string) bool { return filepath.Base(path) == SOGMeta }

// bundleTime is the modification time of every entry of a built bundle: with
// sorted names and stored (not deflated) entries, the same folder always
// gives the same bytes, and so the same sha256 for dedupe.
var bundleTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// SOGFolder is an unbundled SOG that passed CheckSOGFolder. Its files are
// read through root (the folder opened as an os.Root), never by a path
// looked up again: a name that is, or becomes, a link out of the folder
// cannot be read.
type SOGFolder struct {
	Info
	root   *os.Root
	Dir    string
	Files  []string  // meta.json and the images it names, sorted
	Latest time.Time // the newest modification time among Files
}

// CheckSOGFolder checks the folder whose meta.json is at metaPath: meta.json
// is a SOG meta (as in a bundle), every file it names is a plain name in the
// same folder, and each is a complete WebP (RIFF size matching the file). A
// named image that is missing or still short makes the folder incomplete.
// Info.Size is the size of the bundle BuildSOGBundle makes from it.
func CheckSOGFolder(metaPath string) (SOGFolder, error) {
	r, err := os.OpenRoot(filepath.Dir(metaPath))
	if err != nil {
		return SOGFolder{}, withPath(metaPath, err)
	}
	defer r.Close()
	f, err := checkSOGFolder(r, metaPath, nil)
	f.root = nil // closed: CheckSOGFolderIn's folder can be bundled
	return f, withPath(metaPath, err)
}

// CheckSOGFolderIn is CheckSOGFolder on the folder dir, opened as an
// os.Root (the daemon opens it through its watch folder); the result can be
// bundled (BuildSOGBundle) while dir stays open.
func CheckSOGFolderIn(dir *os.Root, metaPath string) (SOGFolder, error) {
	f, err := checkSOGFolder(dir, metaPath, nil)
	return f, withPath(metaPath, err)
}

// openIn opens name in r for reading without blocking on a pipe and
// requires a regular file (fstat).
func openIn(r *os.Root, name string) (*os.File, fs.FileInfo, error) {
	lfi, err := r.Lstat(name)
	if err != nil {
		return nil, nil, err
	}
	if !lfi.Mode().IsRegular() {
		return nil, nil, invalidf("%s is not a regular file", clip(name))
	}
	f, err := r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
	case !fi.Mode().IsRegular():
		err = invalidf("%s is not a regular file", clip(name))
	case !os.SameFile(lfi, fi):
		err = invalidf("%s was replaced while it was opened (a link?)", clip(name))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// readMeta reads the folder r's meta.json: a regular file, not empty, of
// at most maxMeta bytes.
func readMeta(r *os.Root) ([]byte, fs.FileInfo, error) {
	fi, err := r.Lstat(SOGMeta)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, invalidf("not a regular file")
	}
	if fi.Size() == 0 {
		return nil, nil, errEmpty
	}
	if fi.Size() > maxMeta {
		return nil, nil, invalidf("meta.json is %d bytes, more than %d", fi.Size(), maxMeta)
	}
	mf, _, err := openIn(r, SOGMeta)
	if err != nil {
		return nil, nil, err
	}
	defer mf.Close()
	data, err := io.ReadAll(io.LimitReader(mf, maxMeta+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > maxMeta {
		return nil, nil, invalidf("meta.json is more than %d bytes", maxMeta)
	}
	return data, fi, nil
}

// checkSOGFolder checks the folder r and sizes its bundle by writing it
// once, to bundle too when it is not nil (HashSOGFolderIn hashes it there:
// one read of the images for both).
func checkSOGFolder(r *os.Root, metaPath string, bundle io.Writer) (SOGFolder, error) {
	dir := filepath.Dir(metaPath)
	data, fi, err := readMeta(r)
	if err != nil {
		return SOGFolder{}, err
	}
	files, err := metaFiles(data)
	if err != nil {
		return SOGFolder{}, err
	}
	present := map[string]bool{SOGMeta: true}
	latest := fi.ModTime()
	for _, name := range files {
		mt, err := checkWebPFile(r, name)
		if err != nil {
			return SOGFolder{}, err
		}
		present[name] = true
		if mt.After(latest) {
			latest = mt
		}
	}
	n, err := checkMeta(data, present)
	if err != nil {
		return SOGFolder{}, err
	}
	all := append([]string{SOGMeta}, files...)
	slices.Sort(all)
	out := SOGFolder{root: r, Dir: dir, Files: slices.Compact(all), Latest: latest}
	var cw countWriter
	w := io.Writer(&cw)
	if bundle != nil {
		w = io.MultiWriter(&cw, bundle)
	}
	if err := writeBundle(w, r, out.Files); err != nil {
		return SOGFolder{}, err
	}
	out.Info = Info{Kind: KindSOGFolder, Vertices: n, Size: cw.n}
	return out, nil
}

// SOGFolderFiles lists the files of the unbundled SOG folder dir that its
// meta.json names, present or not, and meta.json last: what an after-action
// moves or removes of a published folder (other files in it stay).
func SOGFolderFiles(dir *os.Root) ([]string, error) {
	data, _, err := readMeta(dir)
	if err != nil {
		return nil, err
	}
	files, err := metaFiles(data)
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	return append(slices.Compact(files), SOGMeta), nil
}

// FolderAsFile is the path an unbundled SOG folder (meta is its meta.json)
// is published as, in the watch folder root: FOLDER.sog beside the folder,
// or inside it when the folder is root itself, so that its title template
// and sidecar (FOLDER.splat.yaml there) are those of that file and never
// read from above the watch folder. A path that is not a folder's
// meta.json is itself.
func FolderAsFile(root, meta string) string {
	if !IsSOGFolder(meta) {
		return meta
	}
	dir := filepath.Dir(meta)
	name := filepath.Base(dir) + ".sog"
	if root != "" && filepath.Clean(dir) == filepath.Clean(root) {
		return filepath.Join(dir, name)
	}
	return filepath.Join(filepath.Dir(dir), name)
}

// metaFiles lists the file names meta.json's sections name, each a plain
// base name (no folder, no "..", not meta.json itself).
func metaFiles(data []byte) ([]string, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return nil, invalidf("meta.json is not a JSON object")
	}
	var files []string
	for _, name := range append(sogSections, "shN") {
		var s sogSection
		if raw, ok := top[name]; !ok || json.Unmarshal(raw, &s) != nil {
			continue // checkMeta names the problem
		}
		for _, f := range s.Files {
			if f == "" || f != filepath.Base(f) || strings.ContainsAny(f, `/\`) || f == "." || f == ".." || f == SOGMeta {
				return nil, invalidf("meta.json: %q names %q, not a plain file name in its folder", name, clip(f))
			}
			files = append(files, f)
		}
	}
	if len(files) > 64 {
		return nil, invalidf("meta.json names %d files (a SOG has at most a dozen)", len(files))
	}
	return files, nil
}

// checkWebPFile checks that the regular file at path is a whole WebP: a
// RIFF header whose size is the file's. It returns its modification time.
func checkWebPFile(r *os.Root, name string) (time.Time, error) {
	fi, err := r.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, incompletef("waiting for %s, which meta.json names", clip(name))
	}
	if err != nil {
		return time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return time.Time{}, invalidf("%s is not a regular file", clip(name))
	}
	f, fi, err := openIn(r, name)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	head := make([]byte, 12)
	n, err := io.ReadFull(f, head)
	head = head[:n]
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return time.Time{}, err
	}
	riff := []byte("RIFF\x00\x00\x00\x00WEBP")
	for i, c := range head {
		if (i < 4 || i >= 8) && c != riff[i] {
			return time.Time{}, invalidf("%s is not a WebP image (starts with %s)", clip(name), quoteStart(head))
		}
	}
	if n < 12 {
		return time.Time{}, incompletef("%s is %d bytes so far", clip(name), n)
	}
	want := int64(binary.LittleEndian.Uint32(head[4:])) + 8
	switch {
	case fi.Size() < want:
		return time.Time{}, incompletef("%s is %d of %d bytes", clip(name), fi.Size(), want)
	case fi.Size() > want:
		return time.Time{}, invalidf("%s is %d bytes, %d more than its RIFF header declares", clip(name), fi.Size(), fi.Size()-want)
	}
	return fi.ModTime(), nil
}

// HashSOGFolderIn is CheckSOGFolderIn that also returns the sha256 of the
// bundle BuildSOGBundle makes from the folder: what a folder is published,
// deduplicated and receipted as. The images are read once; nothing is
// written.
func HashSOGFolderIn(dir *os.Root, metaPath string) (SOGFolder, string, error) {
	h := sha256.New()
	f, err := checkSOGFolder(dir, metaPath, h)
	if err != nil {
		return f, "", withPath(metaPath, err)
	}
	return f, hex.EncodeToString(h.Sum(nil)), nil
}

// BuildSOGBundle writes the bundled .sog of a checked folder to w: a ZIP of
// its files under their own names, sorted, stored, all dated bundleTime.
// The same files give the same bytes. Files are read again here; one that
// changed size since the check fails the build.
func BuildSOGBundle(w io.Writer, f SOGFolder) error {
	if f.root == nil {
		return fmt.Errorf("%s: the folder is closed (check it with CheckSOGFolderIn)", f.Dir)
	}
	var cw countWriter
	if err := writeBundle(io.MultiWriter(w, &cw), f.root, f.Files); err != nil {
		return err
	}
	if cw.n != f.Size {
		return fmt.Errorf("%s: the folder changed while its bundle was built (%d bytes, %d when checked)", f.Dir, cw.n, f.Size)
	}
	return nil
}

func writeBundle(w io.Writer, r *os.Root, files []string) error {
	zw := zip.NewWriter(w)
	for _, name := range files {
		src, fi, err := openIn(r, name)
		if err != nil {
			return err
		}
		h := &zip.FileHeader{Name: name, Method: zip.Store, Modified: bundleTime}
		h.SetMode(0o644)
		fw, err := zw.CreateHeader(h)
		if err == nil {
			_, err = io.Copy(fw, io.LimitReader(src, fi.Size()))
		}
		src.Close()
		if err != nil {
			return err
		}
	}
	return zw.Close()
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
