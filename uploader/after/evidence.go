package after

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Receipts are evidence: one saying done is written only once the publish is
// known done, and adoption trusts its sha256 (README, "Receipts are
// evidence", states the cost).

// Service is the protocol and service that receipts must name (when they
// name one) to count as evidence for this daemon.
type Service struct {
	Protocol string // "legacy" when empty
	API      string // api.base_url
}

// Evidence is the verdict on one file's receipt.
type Evidence struct {
	File    string
	Receipt Receipt
	// Done is true when the receipt proves the file's current content
	// published; then SHA256, Size and ModTime describe the file as hashed.
	Done    bool
	SHA256  string
	Size    int64
	ModTime time.Time
	// Why says why a receipt that exists is not evidence ("" when Done).
	Why string
}

// ErrNoReceipt: the file has no receipt.
var ErrNoReceipt = errors.New("no receipt")

// ReceiptMax is the size cap of a receipt read from a watch folder.
const ReceiptMax = trustfs.SmallMax

// ReadReceipt reads and decodes the receipt of file.
func ReadReceipt(file string) (Receipt, error) { return readReceiptIn(nil, "", file) }

// readReceiptIn reads the receipt of file through the watch folder root
// (file's own folder when ""): at most ReceiptMax bytes, never through a
// link, a pipe or a device (those are errors, not receipts).
func readReceiptIn(fsys *trustfs.FS, root, file string) (Receipt, error) {
	b, err := fsys.ReadSmall(root, ReceiptPath(file), ReceiptMax)
	if errors.Is(err, fs.ErrNotExist) {
		return Receipt{}, ErrNoReceipt
	}
	if err != nil {
		return Receipt{}, err
	}
	return decodeReceipt(ReceiptPath(file), b)
}

// decodeReceipt decodes a receipt's bytes (path names it in errors).
func decodeReceipt(path string, b []byte) (Receipt, error) {
	var r Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return Receipt{}, fmt.Errorf("%s: not a receipt: %w", path, err)
	}
	return r, nil
}

// Check is CheckIn with file's own folder as the root.
func Check(ctx context.Context, file string, svc Service) (Evidence, error) {
	return CheckIn(ctx, nil, "", file, svc)
}

// CheckIn weighs file's receipt, both read through the watch folder root
// (trustfs): it is evidence when it says done (or
// duplicate: the same content was published as done) for the file's
// current sha256 and size, and names this service's protocol and API when
// it names them at all. Only a file that has such a receipt is hashed. It
// returns ErrNoReceipt when there is none; other errors are I/O errors.
func CheckIn(ctx context.Context, fsys *trustfs.FS, root, file string, svc Service) (Evidence, error) {
	ev := Evidence{File: file}
	r, err := readReceiptIn(fsys, root, file)
	if err != nil {
		return ev, err
	}
	ev.Receipt = r
	fi, err := fsys.Lstat(root, file)
	if err != nil {
		return ev, err
	}
	if splatfile.IsSOGFolder(file) && fi.Mode().IsRegular() {
		return checkFolderIn(ctx, fsys, root, file, fi, ev, svc)
	}
	switch {
	case why(r, svc) != "":
		ev.Why = why(r, svc)
	case !fi.Mode().IsRegular():
		ev.Why = "not a regular file"
	case fi.Size() != r.Size:
		ev.Why = fmt.Sprintf("the file has changed since (size %d, the receipt says %d)", fi.Size(), r.Size)
	}
	if ev.Why != "" {
		return ev, nil
	}
	f, fi1, err := fsys.OpenRegular(root, file)
	if err != nil {
		return ev, err
	}
	defer f.Close()
	sum, err := trustfs.Hash(ctx, f)
	if err != nil {
		return ev, err
	}
	fi2, err := f.Stat()
	if err != nil {
		return ev, err
	}
	if !os.SameFile(fi, fi1) || fi2.Size() != fi.Size() || !fi2.ModTime().Equal(fi.ModTime()) {
		ev.Why = "the file changed while it was hashed"
		return ev, nil
	}
	if sum != r.SHA256 {
		ev.Why = "the file has changed since (its sha256 differs from the receipt's)"
		return ev, nil
	}
	ev.Done, ev.SHA256, ev.Size, ev.ModTime = true, sum, fi.Size(), fi.ModTime()
	return ev, nil
}

// why says why receipt r is no evidence for this service (an empty
// protocol is legacy), whatever the file holds ("" when it may be).
func why(r Receipt, svc Service) string {
	if svc.Protocol == "" {
		svc.Protocol = "legacy"
	}
	switch {
	case r.Status != "done" && r.Status != "duplicate":
		return fmt.Sprintf("the receipt says %q, not done", r.Status)
	case r.SHA256 == "":
		return "the receipt has no sha256"
	case r.Protocol != "" && r.Protocol != svc.Protocol:
		return fmt.Sprintf("published through protocol %s, this daemon uses %s", r.Protocol, svc.Protocol)
	case r.API != "" && svc.API != "" && r.API != svc.API:
		return fmt.Sprintf("published to %s, this daemon publishes to %s", r.API, svc.API)
	}
	return ""
}

// checkFolderIn is CheckIn for an unbundled SOG folder (file is its
// meta.json, fi its stat): its receipt names the bundle, so the folder is
// checked and its bundle hashed (nothing is written), once the bundle's
// size, known from the files' stat, is the receipt's: a folder whose images
// are sparse gigabytes is not read for a receipt that cannot match. The
// evidence's Size and ModTime are meta.json's, the folder's handle in the
// watcher's listing.
func checkFolderIn(ctx context.Context, fsys *trustfs.FS, root, file string, fi fs.FileInfo, ev Evidence, svc Service) (Evidence, error) {
	r := ev.Receipt
	if ev.Why = why(r, svc); ev.Why != "" {
		return ev, nil
	}
	dir, err := fsys.OpenDir(root, filepath.Dir(file))
	if err != nil {
		return ev, err
	}
	defer dir.Close()
	f, err := splatfile.CheckSOGFolderIn(dir, file)
	switch {
	case errors.Is(err, splatfile.ErrIncomplete):
		ev.Why = "the folder is incomplete: " + err.Error()
		return ev, nil
	case err != nil:
		return ev, err
	case f.Size != r.Size:
		ev.Why = fmt.Sprintf("the folder has changed since (its bundle is %d bytes, the receipt says %d)", f.Size, r.Size)
		return ev, nil
	}
	sum, err := splatfile.HashSOGBundle(ctx, f)
	switch {
	case err != nil:
		return ev, fmt.Errorf("%s: %w", file, err)
	case sum != r.SHA256:
		ev.Why = "the folder has changed since (its bundle differs from the receipt's)"
		return ev, nil
	}
	ev.Done, ev.SHA256, ev.Size, ev.ModTime = true, sum, fi.Size(), fi.ModTime()
	return ev, nil
}

// RemoveOwnReceipt removes the receipt beside file (through its watch
// folder root) when it is job's own for this content: written for job, of
// sha256. `splatd forget` uses it, so that the forgotten file is found
// again as new and published again, not adopted back from the receipt the
// job left. Any other receipt (a peer's, an older job's, a writer's) stays.
func RemoveOwnReceipt(fsys *trustfs.FS, root, file string, job uint64, sha256 string) (bool, error) {
	r, err := readReceiptIn(fsys, root, file)
	if errors.Is(err, ErrNoReceipt) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if r.Job != job || r.SHA256 != sha256 || job == 0 {
		return false, nil
	}
	if err := fsys.RemoveIf(root, ReceiptPath(file), trustfs.ID{}); err != nil {
		return false, err
	}
	return true, nil
}
