package splatfile

import (
	"archive/zip"
	"context"
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
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/watcher/trustfs"
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
	sizes  []int64   // each file's size when checked, as Files
}

// CheckSOGFolder checks the folder whose meta.json is at metaPath: meta.json
// is a SOG meta (as in a bundle), every file it names is a plain name in the
// same folder, and each is a complete WebP (RIFF size matching the file). A
// named image that is missing or still short makes the folder incomplete.
// Info.Size is the size of the bundle BuildSOGBundle makes from it, known
// from the files' stat: of each image only its 12-byte header is read, so a
// folder of sparse gigabytes is sized, and can be refused, at no cost.
func CheckSOGFolder(metaPath string) (SOGFolder, error) {
	r, err := new(trustfs.FS).OpenDir("", filepath.Dir(metaPath)) // the folder's own path
	if err != nil {
		return SOGFolder{}, withPath(metaPath, err)
	}
	defer r.Close()
	f, err := checkSOGFolder(r, metaPath)
	f.root = nil // closed: CheckSOGFolderIn's folder can be bundled
	return f, withPath(metaPath, err)
}

// CheckSOGFolderIn is CheckSOGFolder on the folder dir, opened as an
// os.Root (the daemon opens it through its watch folder); the result can be
// bundled (BuildSOGBundle) while dir stays open.
func CheckSOGFolderIn(dir *os.Root, metaPath string) (SOGFolder, error) {
	f, err := checkSOGFolder(dir, metaPath)
	return f, withPath(metaPath, err)
}

// openIn opens name in r for reading (trustfs.OpenIn): non-blocking, a
// regular file only, never through a link at its name.
func openIn(r *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, fi, err := trustfs.OpenIn(r, name)
	var nr *trustfs.NotRegularError
	switch {
	case !errors.As(err, &nr):
		return f, fi, err
	case nr.Kind == trustfs.KindReplaced:
		return nil, nil, invalidf("%s was replaced while it was opened (a link?)", clip(name))
	}
	return nil, nil, invalidf("%s is not a regular file", clip(name))
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

// checkSOGFolder checks the folder r and sizes its bundle from its files'
// stat (bundleSize), reading meta.json and the images' headers only.
func checkSOGFolder(r *os.Root, metaPath string) (SOGFolder, error) {
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
	sizeOf := map[string]int64{SOGMeta: fi.Size()}
	latest := fi.ModTime()
	for _, name := range files {
		ifi, err := checkWebPFile(r, name)
		if err != nil {
			return SOGFolder{}, err
		}
		present[name], sizeOf[name] = true, ifi.Size()
		if ifi.ModTime().After(latest) {
			latest = ifi.ModTime()
		}
	}
	n, err := checkMeta(data, present)
	if err != nil {
		return SOGFolder{}, err
	}
	all := append([]string{SOGMeta}, files...)
	slices.Sort(all)
	out := SOGFolder{root: r, Dir: dir, Files: slices.Compact(all), Latest: latest}
	for _, name := range out.Files {
		out.sizes = append(out.sizes, sizeOf[name])
	}
	out.Info = Info{Kind: KindSOGFolder, Vertices: n, Size: bundleSize(out.Files, out.sizes)}
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
// RIFF header whose size is the file's. It returns its stat; only the
// header is read.
func checkWebPFile(r *os.Root, name string) (fs.FileInfo, error) {
	fi, err := r.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, incompletef("waiting for %s, which meta.json names", clip(name))
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, invalidf("%s is not a regular file", clip(name))
	}
	f, fi, err := openIn(r, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 12)
	n, err := io.ReadFull(f, head)
	head = head[:n]
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	riff := []byte("RIFF\x00\x00\x00\x00WEBP")
	for i, c := range head {
		if (i < 4 || i >= 8) && c != riff[i] {
			return nil, invalidf("%s is not a WebP image (starts with %s)", clip(name), quoteStart(head))
		}
	}
	if n < 12 {
		return nil, incompletef("%s is %d bytes so far", clip(name), n)
	}
	want := int64(binary.LittleEndian.Uint32(head[4:])) + 8
	switch {
	case fi.Size() < want:
		return nil, incompletef("%s is %d of %d bytes", clip(name), fi.Size(), want)
	case fi.Size() > want:
		return nil, invalidf("%s is %d bytes, %d more than its RIFF header declares", clip(name), fi.Size(), fi.Size()-want)
	}
	return fi, nil
}

// HashSOGFolderIn is CheckSOGFolderIn that also returns the sha256 of the
// bundle BuildSOGBundle makes from the folder (HashSOGBundle): what a folder
// is published, deduplicated and receipted as. Nothing is written. A caller
// that bounds the bundle's size checks, bounds, then hashes instead.
func HashSOGFolderIn(ctx context.Context, dir *os.Root, metaPath string) (SOGFolder, string, error) {
	f, err := CheckSOGFolderIn(dir, metaPath)
	if err != nil {
		return f, "", err
	}
	sum, err := HashSOGBundle(ctx, f)
	return f, sum, withPath(metaPath, err)
}

// HashSOGBundle returns the sha256 of the bundle BuildSOGBundle makes from
// a checked folder: the images are read once, and nothing is written.
func HashSOGBundle(ctx context.Context, f SOGFolder) (string, error) {
	h := sha256.New()
	if err := BuildSOGBundle(ctx, h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// BuildSOGBundle writes the bundled .sog of a checked folder to w: a ZIP of
// its files under their own names, sorted, stored, all dated bundleTime.
// The same files give the same bytes. Files are read again here, each up to
// its size when checked, checking ctx every MiB (a bundle may be tens of
// gigabytes and a shutdown must not wait for it); one whose size changed
// since the check fails the build, so that it writes at most the Size the
// check found (and its caller bounded).
func BuildSOGBundle(ctx context.Context, w io.Writer, f SOGFolder) error {
	if f.root == nil {
		return fmt.Errorf("%s: the folder is closed (check it with CheckSOGFolderIn)", f.Dir)
	}
	var cw countWriter
	if err := writeBundle(ctx, io.MultiWriter(w, &cw), f.root, f.Files, f.sizes); err != nil {
		return err
	}
	if cw.n != f.Size {
		return fmt.Errorf("%s: the folder changed while its bundle was built (%d bytes, %d when checked)", f.Dir, cw.n, f.Size)
	}
	return nil
}

// bundleHeader is the ZIP header of a bundle's entry name: stored, with the
// fixed time and mode that keep a bundle's bytes reproducible.
func bundleHeader(name string) *zip.FileHeader {
	h := &zip.FileHeader{Name: name, Method: zip.Store, Modified: bundleTime}
	h.SetMode(0o644)
	return h
}

// writeBundle writes the bundle of files to w, each entry as long as
// sizes says: the file's size when the folder was checked.
func writeBundle(ctx context.Context, w io.Writer, r *os.Root, files []string, sizes []int64) error {
	zw := zip.NewWriter(w)
	buf := make([]byte, 1<<20) // the reader checks ctx once per buffer: every MiB
	for i, name := range files {
		if err := writeEntry(ctx, zw, r, name, sizes[i], buf); err != nil {
			return err
		}
	}
	return zw.Close()
}

func writeEntry(ctx context.Context, zw *zip.Writer, r *os.Root, name string, size int64, buf []byte) error {
	src, fi, err := openIn(r, name)
	if err != nil {
		return err
	}
	defer src.Close()
	if fi.Size() != size {
		return fmt.Errorf("%s changed since the folder was checked (%d bytes, %d then)", clip(name), fi.Size(), size)
	}
	fw, err := zw.CreateHeader(bundleHeader(name))
	if err != nil {
		return err
	}
	n, err := io.CopyBuffer(fw, io.LimitReader(state.ContextReader(ctx, src), size), buf)
	if err == nil && n != size {
		err = fmt.Errorf("%s changed while the bundle was built (%d bytes read, %d checked)", clip(name), n, size)
	}
	return err
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// The sizes of the records archive/zip writes for a bundle's entries
// (stored, dated, through CreateHeader: the sizes follow the data, in a
// data descriptor).
const (
	zipLocal        = 30 + 9  // local header, with its extended timestamp
	zipCentral      = 46 + 9  // central directory record, with its timestamp
	zipDescriptor   = 16      // data descriptor
	zipDescriptor64 = 24      // data descriptor of an entry of 4 GiB or more
	zipExtra64      = 28      // a central record's ZIP64 extra field
	zipEnd          = 22      // end of central directory record
	zipEnd64        = 56 + 20 // ZIP64 end of central directory record and locator
	zipMax32        = 1<<32 - 1
)

// bundleSize is the size of the bundle writeBundle makes of files of these
// names and sizes, as archive/zip lays it out: per entry a local header with
// its name, the data and a data descriptor (the ZIP64 one for an entry of
// 4 GiB or more); per entry a central directory record with its name (and
// a ZIP64 extra when the entry is that large or starts past 4 GiB); the end
// record (and the ZIP64 end records when the directory starts or spans
// past 4 GiB). BuildSOGBundle checks the figure against the bytes written.
func bundleSize(names []string, sizes []int64) int64 {
	var off, dir int64
	for i, name := range names {
		big := sizes[i] >= zipMax32
		dir += zipCentral + int64(len(name))
		if big || off >= zipMax32 {
			dir += zipExtra64
		}
		off += zipLocal + int64(len(name)) + sizes[i] + zipDescriptor
		if big {
			off += zipDescriptor64 - zipDescriptor
		}
	}
	end := int64(zipEnd)
	if len(names) >= 1<<16-1 || dir >= zipMax32 || off >= zipMax32 {
		end += zipEnd64
	}
	return off + dir + end
}
