// Package splatfile checks that a Gaussian splat file (.ply, compressed
// .ply, .sog, .spz, or the meta.json of an unbundled SOG folder) is complete
// and well formed before it is uploaded, reading only what it must (a
// header, a ZIP directory; an SPZ in a stream). Check gives one of three
// outcomes, each acted on differently:
//   - valid: (Info, nil);
//   - still being written: errors.Is(err, ErrIncomplete); the caller waits
//     for the file to change, and its own patience decides when it is broken;
//   - malformed: an *InvalidError; the file is never uploaded.
//
// Every error starts with the path and fits on one line ("PATH: invalid:
// REASON", "PATH: incomplete: REASON", or an *os.PathError); Reason(err)
// gives the bare REASON. The formats are in docs/formats.md.
package splatfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kind names the container format of a splat file.
type Kind string

// The kinds Check recognises.
const (
	KindPLY           Kind = "ply"            // plain 3DGS PLY (one float per property)
	KindCompressedPLY Kind = "compressed-ply" // PlayCanvas compressed PLY (chunk + packed vertex)
	KindSOG           Kind = "sog"            // ZIP bundle of meta.json and WebP images
	KindSPZ           Kind = "spz"            // Niantic SPZ: gzip-wrapped (v2, v3) or ZSTD streams (v4)
	KindSOGFolder     Kind = "sog-folder"     // unbundled SOG: meta.json and its images, published as a bundle
)

// SourceFormat is the v1 API's sourceFormat for a file of this kind: what
// the bytes sent are ("ply" for both PLY layouts), or "" for no kind.
func (k Kind) SourceFormat() string {
	switch k {
	case KindPLY, KindCompressedPLY:
		return "ply"
	case KindSOG, KindSOGFolder:
		return "sog"
	case KindSPZ:
		return "spz"
	}
	return ""
}

// ErrNotLegacy is the refusal of a kind the legacy API does not take
// (Kind.CheckLegacy); the daemon's sign step, `splatd publish` and the dry
// run all give it.
var ErrNotLegacy = errors.New("the legacy API takes .ply and .sog files")

// CheckLegacy returns nil when the legacy API takes a file of kind k, else
// ErrNotLegacy naming k and the way out.
func (k Kind) CheckLegacy() error {
	if k.Legacy() {
		return nil
	}
	return fmt.Errorf("%w, not %s: publish it with api.protocol: v1", ErrNotLegacy, k)
}

// Legacy reports whether the legacy API takes a file of this kind: its
// upload is a .ply or a .sog, which the service converts.
func (k Kind) Legacy() bool {
	switch k {
	case KindPLY, KindCompressedPLY, KindSOG, KindSOGFolder:
		return true
	}
	return false
}

// MaxHeader is how far into a PLY file the header's end_header line must
// appear. Real headers are a few kilobytes; the bound keeps Check cheap and
// turns a missing end_header in a large file into a definite "invalid".
const MaxHeader = 128 << 10

// ErrIncomplete means the file is not finished yet: it is shorter than its
// header declares, its header is cut short, or it is a ZIP whose central
// directory (written last) is missing. Wait and check again; do not fail.
var ErrIncomplete = errors.New("incomplete")

// ErrEmpty is returned (wrapped with the path) for a 0-byte file. It wraps
// ErrIncomplete because capture tools routinely create a file before they
// write its first byte, so a watcher or worker waits on it like any other
// short file; `splatd validate` still rejects it (exit 1) because an empty
// file is not a valid splat as it stands.
var ErrEmpty = fmt.Errorf("%w: empty file (0 bytes)", ErrIncomplete)

// InvalidError reports a malformed file: it must fail its job with Reason and
// never be uploaded. Reason is one line and names the problem.
type InvalidError struct {
	Path   string
	Reason string
}

// Error returns "PATH: invalid: REASON".
func (e *InvalidError) Error() string { return e.Path + ": invalid: " + e.Reason }

// Invalid reports true; it lets the job state machine classify the error
// through a one-method interface without importing this package.
func (e *InvalidError) Invalid() bool { return true }

// Info describes a file that passed Check.
type Info struct {
	Kind     Kind
	Encoding string // PLY: "ascii", "binary_little_endian" or "binary_big_endian"; SOG: "zip"
	Vertices int64  // number of splats (PLY vertex count, SOG meta count; 0 if SOG meta gives none)
	Size     int64  // file size in bytes at the time of the check
}

// Check inspects the file at path without reading its body: the first
// MaxHeader bytes of a PLY, or the central directory and meta.json of a SOG.
// The content decides the format; a .ply file holding a ZIP, or a .sog file
// holding anything but a ZIP, is invalid because the server picks its decoder
// by extension.
//
// A path whose base name is meta.json is an unbundled SOG folder's handle:
// Check checks the folder (CheckSOGFolder).
func Check(path string) (Info, error) {
	if IsSOGFolder(path) {
		f, err := CheckSOGFolder(path)
		return f.Info, err
	}
	// Non-blocking: a named pipe is refused below, never waited on.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	return CheckFile(f, path)
}

// CheckFile is Check on a file already open (path names it in errors and
// gives its extension): the worker checks, hashes and uploads one
// descriptor.
func CheckFile(f *os.File, path string) (Info, error) {
	fi, err := f.Stat()
	if err != nil {
		return Info{}, err
	}
	if fi.IsDir() {
		return Info{}, &InvalidError{Path: path, Reason: "not a regular file but a folder (an unbundled SOG is checked through its meta.json)"}
	}
	if !fi.Mode().IsRegular() {
		return Info{}, &InvalidError{Path: path, Reason: "not a regular file"}
	}
	info, err := check(f, fi.Size(), strings.ToLower(filepath.Ext(path)))
	return info, withPath(path, err)
}

// problem is the path-less form of an error found by check; withPath turns
// it into the exported shapes.
type problem struct {
	incomplete bool
	reason     string
}

func (p *problem) Error() string {
	if p.incomplete {
		return "incomplete: " + p.reason
	}
	return "invalid: " + p.reason
}

func invalidf(format string, a ...any) error {
	return &problem{reason: fmt.Sprintf(format, a...)}
}

func incompletef(format string, a ...any) error {
	return &problem{incomplete: true, reason: fmt.Sprintf(format, a...)}
}

// Is lets errors.Is(err, ErrIncomplete) hold inside the package too, where
// check's errors are not yet wrapped by withPath.
func (p *problem) Is(target error) bool { return p.incomplete && target == ErrIncomplete }

// errEmpty is check's form of ErrEmpty.
var errEmpty = &problem{incomplete: true, reason: "empty file (0 bytes)"}

// incompleteError is the exported form of an incomplete problem: its text
// names the path, and errors.Is matches ErrIncomplete (and ErrEmpty for an
// empty file).
type incompleteError struct {
	path, reason string
	empty        bool
}

func (e *incompleteError) Error() string { return e.path + ": incomplete: " + e.reason }

func (e *incompleteError) Is(target error) bool {
	return target == ErrIncomplete || (e.empty && target == ErrEmpty)
}

// Reason returns the bare one-line reason of an error from Check, without
// the path and the "invalid:"/"incomplete:" label, for output such as
// `FILE: invalid: REASON`. Other errors are returned as their full text.
func Reason(err error) string {
	var inv *InvalidError
	var inc *incompleteError
	switch {
	case errors.As(err, &inv):
		return inv.Reason
	case errors.As(err, &inc):
		return inc.reason
	case err == nil:
		return ""
	default:
		return err.Error()
	}
}

// withPath converts check's errors into "PATH: ..." errors that keep
// ErrIncomplete / ErrEmpty / *InvalidError identity.
func withPath(path string, err error) error {
	var p *problem
	switch {
	case err == nil:
		return nil
	case errors.As(err, &p) && p.incomplete:
		return &incompleteError{path: path, reason: p.reason, empty: err == errEmpty}
	case errors.As(err, &p):
		return &InvalidError{Path: path, Reason: p.reason}
	default: // I/O error while reading an open file
		return fmt.Errorf("%s: %w", path, err)
	}
}

var (
	magicPLY = []byte("ply")
	magicZIP = []byte("PK\x03\x04")
)

// check is Check on any ReaderAt; ext is the lower-case extension (".ply",
// ".sog" or anything else). Fuzz tests call it directly.
func check(r io.ReaderAt, size int64, ext string) (Info, error) {
	if size == 0 {
		return Info{}, errEmpty
	}
	n := size
	if n > MaxHeader {
		n = MaxHeader
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return Info{}, err
	}
	switch {
	case hasPrefix(buf, magicZIP):
		switch ext {
		case ".ply":
			return Info{}, invalidf("ZIP (SOG) content in a .ply file")
		case ".spz":
			return Info{}, invalidf("ZIP (SOG) content in a .spz file")
		}
		return checkSOG(r, size)
	case hasPrefix(buf, magicPLY) && (len(buf) <= 3 || buf[3] == '\n' || buf[3] == '\r'):
		switch ext {
		case ".sog":
			return Info{}, invalidf("PLY content in a .sog file (a SOG is a ZIP archive)")
		case ".spz":
			return Info{}, invalidf("PLY content in a .spz file")
		}
		return checkPLY(buf, size)
	case hasPrefix(buf, magicGzip) || hasPrefix(buf, magicSPZ):
		if ext != ".spz" {
			return Info{}, invalidf("SPZ content in a %s (the server picks its decoder by extension)", extName(ext))
		}
		return checkSPZ(r, size, buf)
	case ext == ".sog":
		return Info{}, invalidf("not a ZIP archive (starts with %s)", quoteStart(buf))
	case ext == ".spz":
		return Info{}, invalidf("not an SPZ file (starts with %s, want gzip or \"NGSP\")", quoteStart(buf))
	default:
		return Info{}, invalidf("not a PLY, SOG or SPZ file (starts with %s)", quoteStart(buf))
	}
}

// hasPrefix is true when buf starts with magic, or when the whole file is
// shorter than magic and is a prefix of it: a file whose first bytes are
// still arriving.
func hasPrefix(buf, magic []byte) bool {
	if len(buf) < len(magic) {
		return string(magic[:len(buf)]) == string(buf)
	}
	return string(buf[:len(magic)]) == string(magic)
}

// extName names an extension in a reason ("no extension" for none).
func extName(ext string) string {
	if ext == "" {
		return "file without an extension"
	}
	return clip(ext) + " file"
}

// quoteStart shows the first few bytes of a file in a reason, quoted so that
// binary garbage cannot break the one-line rule.
func quoteStart(buf []byte) string {
	if len(buf) > 8 {
		buf = buf[:8]
	}
	return fmt.Sprintf("%q", buf)
}
