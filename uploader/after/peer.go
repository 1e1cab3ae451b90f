package after

import "fmt"

// PeerEvidence reads the receipt another daemon of a fleet wrote for file
// (through the watch folder root, as every receipt is read)
// and checks it as adoption does (why), against what this daemon hashed:
// done (or a duplicate of a done job) with a splat id, the same sha256 and
// size, the same protocol and service. A sha256 of "" (a job that never read the
// file, and the file is gone: a peer published and deleted it) is not
// compared; the size the job saw is. It returns the receipt and "" when it
// is evidence, else why not; err is ErrNoReceipt when there is none, or a
// read error.
func PeerEvidence(root, file, sha256 string, size int64, svc Service) (Receipt, string, error) {
	r, err := readReceiptIn(root, file)
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
