package v1

import (
	"context"
	"errors"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step"
)

// send sends the missing parts from the file, which must still be the
// one hashed, and moves the job to uploaded when all are stored. Beside
// the parts, the whole file is hashed again from the same descriptor the
// parts read: a sum that differs from the recorded one (the content
// changed, same size and mtime or not) sends the job back before
// complete, so what was hashed is what is published.
func (p *Protocol) send(ctx context.Context, t *pace.Caller, j state.Job, missing []int) (state.Job, error) {
	jf, changed, err := p.env.Pool.UploadFile(j)
	if err != nil {
		return j, err
	}
	if changed != nil {
		return p.env.Pool.Changed(j, changed, "file changed before its parts were sent; hashing again")
	}
	defer jf.Close()
	hctx, stopHash := context.WithCancel(ctx)
	defer stopHash()
	sum, want := make(chan error, 1), jf.Want
	go func() {
		got, err := jf.Hash(hctx, nil)
		if err == nil && got != want {
			err = step.ErrContentChanged
		}
		sum <- err
	}()
	start := p.env.Now()
	j, err = p.sendParts(ctx, t, j, jf.F, missing)
	if err != nil {
		return j, err
	}
	p.env.Client.PartsDone(p.env.Now().Sub(start))
	if err := <-sum; errors.Is(err, step.ErrContentChanged) {
		fi, serr := jf.Restat()
		if serr != nil {
			return j, serr
		}
		return p.env.Pool.Changed(j, fi, "file content changed while its parts were sent (its sha256 differs from the one hashed); uploading again")
	} else if err != nil {
		return j, err
	}
	fi, err := jf.Restat()
	if err != nil {
		return j, err
	}
	if !jf.Unchanged(fi, j) {
		return p.env.Pool.Changed(j, fi, "file changed while its parts were sent; uploading again")
	}
	return p.env.Move(j, state.Uploaded, "")
}
