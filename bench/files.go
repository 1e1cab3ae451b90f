package bench

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/splatd/splatd/uploader/splatfile"
)

// WriteSample writes a small valid 3DGS PLY of n splats whose header
// carries tag as a comment, so that every file has its own content (and
// sha256) even with the same n. It is written under a temporary name and
// renamed, as capture tools that finish a file atomically do.
func WriteSample(path, tag string, n int) error {
	var b bytes.Buffer
	if err := splatfile.WritePLY(&b, n); err != nil {
		return err
	}
	data := bytes.Replace(b.Bytes(), []byte("comment splatd sample\n"), []byte("comment splatd bench "+tag+"\n"), 1)
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// WriteSparsePLY makes a binary PLY of about size bytes that costs no disk:
// a header declaring as many x/y/z vertices as fit, then a Truncate to the
// exact length the header promises (the body reads as zeros). It returns
// the file's length.
func WriteSparsePLY(path, tag string, size int64) (int64, error) {
	header := func(n int64) string {
		return fmt.Sprintf("ply\nformat binary_little_endian 1.0\ncomment splatd bench %s\nelement vertex %d\n"+
			"property float x\nproperty float y\nproperty float z\nend_header\n", tag, n)
	}
	const stride = 12
	n := (size - int64(len(header(size/stride)))) / stride
	h := header(n)
	total := int64(len(h)) + n*stride
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	if _, err := f.WriteString(h); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Truncate(total); err != nil {
		f.Close()
		return 0, err
	}
	return total, f.Close()
}

// FileSHA256 returns the hex sha256 of a file's content.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
