package after

import (
	"errors"
	"fmt"
	"github.com/splatd/splatd/watcher/trustfs"
	"path/filepath"

	"github.com/splatd/splatd/uploader/splatfile"
)

// PeerEvidence reads, through the watch folder root, the receipt another
// daemon of a fleet wrote for file, and returns it with "" when it is
// evidence (adoption's why, and the sha256, size, protocol and service this
// daemon saw), else why not. A sha256 of "" (a job that never read the file)
// is not compared. err is ErrNoReceipt when there is none, or a read error.
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

// MovedPeerEvidence is PeerEvidence for a file a peer published and moved
// under dest (a fleet shares its after settings): it reads, with dest as the
// root, the receipt at every name the move may have picked, with or without
// its file, and the last that is evidence wins (docs/durability.md, "Where
// the receipt goes"). It returns the receipt, its path and "", else the
// first why not, or ErrNoReceipt when there is no receipt at all.
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
