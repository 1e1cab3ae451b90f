package after

import (
	"errors"
	"fmt"
	"github.com/splatd/splatd/watcher/trustfs"
	"path/filepath"

	"github.com/splatd/splatd/uploader/splatfile"
)

// PeerEvidence reads the receipt another daemon of a fleet wrote for file
// (through the watch folder root, as every receipt is read)
// and checks it as adoption does (why), against what this daemon hashed:
// done (or a duplicate of a done job) with a splat id, the same sha256 and
// size, the same protocol and service. A sha256 of "" (a job that never read the
// file, and the file is gone: a peer published and deleted it) is not
// compared; the size the job saw is. It returns the receipt and "" when it
// is evidence, else why not; err is ErrNoReceipt when there is none, or a
// read error.
func PeerEvidence(fsys *trustfs.FS, root, file, sha256 string, size int64, svc Service) (Receipt, string, error) {
	r, err := readReceiptIn(fsys, root, file)
	if err != nil {
		return r, "", err
	}
	if w := why(r, svc); w != "" {
		return r, w, nil
	}
	switch {
	case sha256 != "" && r.SHA256 != sha256:
		return r, "the receipt is for other content (its sha256 differs)", nil
	case r.Size != size:
		return r, fmt.Sprintf("the receipt says size %d, the file was hashed at %d", r.Size, size), nil
	case r.Splat.ID == "":
		return r, "the receipt names no splat", nil
	}
	return r, "", nil
}

// MovedPeerEvidence is PeerEvidence for a file that a peer published and
// then moved under dest (on_success: move with success_dir dest; a fleet's
// daemons share their after settings, so this daemon's dest is the peer's):
// the receipt went along, to where the move put the file (moveTarget, or
// moveFolderTarget for an unbundled SOG folder), or to one of the numbered
// names a move picks when that name is taken. Finish writes it there before
// the file leaves its place, so a receipt whose file has not arrived yet
// counts as well: it is the one a peer finds in the instant between. Every
// such name that is present (the file or its receipt) is read, and the last one that is evidence wins (the latest move
// of a name takes the first free number). Receipts are read through dest
// as the root (trustfs): a link there, or a folder there replaced by one,
// never makes it read outside dest. It returns the receipt, its path and
// "" when one is evidence; else the first why not, or ErrNoReceipt when
// there is no receipt at all (or a read error).
func MovedPeerEvidence(fsys *trustfs.FS, root, file, dest, sha256 string, size int64, svc Service) (Receipt, string, string, error) {
	name := func(i int) (moved, present string) {
		if splatfile.IsSOGFolder(file) {
			dir := moveFolderTarget(file, root, dest)
			if i > 0 {
				dir = fmt.Sprintf("%s.%d", dir, i)
			}
			return filepath.Join(dir, splatfile.SOGMeta), dir
		}
		moved = moveTarget(file, root, dest)
		if i > 0 {
			moved = numbered(moved, i)
		}
		return moved, moved
	}
	var (
		found, first Receipt
		where, why   string
		firstErr     = ErrNoReceipt
	)
	for i := 0; ; i++ {
		moved, present := name(i)
		if !existsIn(fsys, dest, present) && !existsIn(fsys, dest, ReceiptPath(moved)) {
			break
		}
		r, w, err := PeerEvidence(fsys, dest, moved, sha256, size, svc)
		switch {
		case err == nil && w == "":
			found, where = r, ReceiptPath(moved)
		case errors.Is(err, ErrNoReceipt):
		case firstErr == ErrNoReceipt && why == "":
			first, why, firstErr = r, w, err
		}
	}
	switch {
	case where != "":
		return found, where, "", nil
	case why != "":
		return first, "", why, nil
	}
	return Receipt{}, "", "", firstErr
}
