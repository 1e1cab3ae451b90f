package step

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// File is the content a job uploads, open: its own file, or the encoding
// made of it (publish.encode) in the state directory (docs/architecture.md,
// "One open, one hash").
type File struct {
	F    *os.File
	Info fs.FileInfo // fstat when opened (or last checked)
	// Want and Size are what the upload must read: the job's sha256 and
	// size, or its encoding's.
	Want    string
	Size    int64
	Encoded bool
}

func (jf *File) Close() error { return jf.F.Close() }

// Restat refreshes the descriptor's fstat.
func (jf *File) Restat() (fs.FileInfo, error) {
	fi, err := jf.F.Stat()
	if err != nil {
		return nil, err
	}
	jf.Info = fi
	return fi, nil
}

// Hash returns the sha256 of the descriptor's content, read from offset 0;
// every chunk hashed is also written to also (nil: none).
func (jf *File) Hash(ctx context.Context, also io.Writer) (string, error) {
	return trustfs.HashTo(ctx, jf.F, also)
}

// Unchanged reports whether fi (a restat of jf) is still what jf was opened
// for: the job's file as hashed, or its encoding at its recorded size.
func (jf *File) Unchanged(fi fs.FileInfo, j state.Job) bool {
	if jf.Encoded {
		return fi.Size() == jf.Size
	}
	return IsRecorded(fi, j)
}

// IsRecorded reports whether fi is the file j recorded: same size and
// mtime, and the same inode when j recorded one.
func IsRecorded(fi fs.FileInfo, j state.Job) bool {
	if fi.Size() != j.Size || !fi.ModTime().Equal(j.ModTime) {
		return false
	}
	if j.Ino == 0 {
		return true
	}
	id := trustfs.IDOf(fi)
	return id.Dev == j.Dev && id.Ino == j.Ino
}

// FileName is the base name of the file a job stands for: FOLDER.sog for
// an unbundled SOG folder (its job's path is the folder's meta.json).
func FileName(path string) string {
	if splatfile.IsSOGFolder(path) {
		return filepath.Base(filepath.Dir(path)) + ".sog"
	}
	return filepath.Base(path)
}

// UploadName is the file name an upload is signed for: FileName, with the
// encoding's extension when there is one.
func UploadName(j state.Job) string {
	name := FileName(j.Path)
	if j.Encoded != nil {
		name = strings.TrimSuffix(name, filepath.Ext(name)) + "." + j.Encoded.Encoding
	}
	return name
}

// UploadContent names the content a job uploads, for its v1
// Idempotency-Key: the source's sha256, with the encoding when there is
// one, so that daemons of a fleet that differ in publish.encode never meet
// in one session with bytes of different lengths.
func UploadContent(j state.Job) string {
	if j.Encoded != nil {
		return j.SHA256 + "-" + j.Encoded.Encoding
	}
	return j.SHA256
}
