package legacy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/step"
)

// emptySHA256 is the sha256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// put: signed → uploaded. The file must have the size and mtime it was
// hashed with before and after the PUT; otherwise the upload is stale and
// the job goes back to queued. An old URL, or one storage refuses, is
// signed again (back to ready).
func (p *Protocol) put(ctx context.Context, j state.Job) (state.Job, error) {
	pool, now := p.env.Pool, p.env.Now()
	if maxAge := p.env.Timing.URLMaxAge; now.Sub(j.Upload.IssuedAt) > maxAge {
		return step.Resign(j, now, now, "signed URL is older than "+maxAge.String())
	}
	jf, changed, err := pool.UploadFile(j)
	if err != nil {
		return j, err
	}
	if changed != nil {
		return pool.Changed(j, changed, "file changed before upload; hashing again")
	}
	defer jf.Close()
	size := jf.Size
	pool.Report(j, 0, size)
	defer pool.EndReport(j.ID)
	body := newVerifyReader(jf.F, size, jf.Want)
	err = p.env.Client.Put(ctx, j.Upload.URL, body, size, func(sent int64) { pool.Report(j, sent, size) })
	if body.mismatch || (j.Size == 0 && j.SHA256 != emptySHA256) {
		// The PUT never got the last bytes; what storage holds is not
		// published (the job hashes the file again and uploads anew).
		fi, serr := jf.Restat()
		if serr != nil {
			return j, serr
		}
		return pool.Changed(j, fi, "file content changed during upload (its sha256 differs from the one hashed); hashing again")
	}
	if err != nil {
		return j, err // storage refusing the URL: the retry rule re-signs
	}
	if err := pool.Hook("put", j); err != nil {
		return j, err
	}
	fi, err := jf.Restat()
	if err != nil {
		return j, err
	}
	if !jf.Unchanged(fi, j) {
		return pool.Changed(j, fi, "file changed during upload; uploading again")
	}
	now = p.env.Now()
	j.Resigns = 0
	if err := j.Move(state.Uploaded, now); err != nil {
		return j, err
	}
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	return j, nil
}

// verifyReader streams size bytes of f from offset 0 while hashing them;
// the read that would hand out the last bytes first compares the sum with
// want and, when it differs, hands out nothing and fails: the PUT never
// completes with content that is not the hashed one.
type verifyReader struct {
	r        io.Reader
	h        hash.Hash
	left     int64
	want     string
	mismatch bool
}

func newVerifyReader(f *os.File, size int64, want string) *verifyReader {
	return &verifyReader{r: io.NewSectionReader(f, 0, size), h: sha256.New(), left: size, want: want}
}

func (v *verifyReader) Read(p []byte) (int, error) {
	if v.mismatch {
		return 0, step.ErrContentChanged
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.left -= int64(n)
	if v.left <= 0 || err == io.EOF {
		if v.left != 0 || hex.EncodeToString(v.h.Sum(nil)) != v.want {
			v.mismatch = true
			return 0, step.ErrContentChanged
		}
	}
	return n, err
}
