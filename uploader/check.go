package uploader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
	"github.com/splatd/splatd/watcher/trustfs"
)

// workerIncomplete marks splatfile.ErrIncomplete for the retry rule
// (state must not import splatfile), with the file's mtime: a file still
// incomplete incomplete_timeout after it last changed fails.
type workerIncomplete struct {
	err     error
	changed time.Time
}

func (e *workerIncomplete) Error() string        { return e.err.Error() }
func (e *workerIncomplete) Unwrap() error        { return e.err }
func (e *workerIncomplete) Incomplete() bool     { return true }
func (e *workerIncomplete) ChangedAt() time.Time { return e.changed }

// statMatches reports whether fi has the size and mtime j recorded (its
// inode is not compared: isRecordedFile does).
func statMatches(fi fs.FileInfo, j state.Job) bool {
	return fi.Size() == j.Size && fi.ModTime().Equal(j.ModTime)
}

// workerChanged returns j back in Queued with the file's new size and
// mtime, to be checked and hashed again once it has settled. Everything
// derived from the old content is dropped.
func (p *Pool) workerChanged(j state.Job, fi fs.FileInfo, why string) (state.Job, error) {
	now := p.o.Now()
	old := j
	if err := j.Reset(state.ResetChanged, now); err != nil {
		return j, err
	}
	dropEncoded(old)
	j.Size, j.ModTime = fi.Size(), fi.ModTime()
	j.NextAttempt = now.Add(p.o.Timing.Settle)
	j.LastError, j.LastStatus = why, 0
	return j, nil
}

// stepCheck: queued → ready. The file must be unchanged since it was last
// seen, pass the content check, and not change while it is hashed. It is
// opened once, through its watch folder, and that descriptor is checked,
// hashed and kept for the upload.
func (p *Pool) stepCheck(ctx context.Context, j state.Job) (state.Job, error) {
	if splatfile.IsSOGFolder(j.Path) {
		return p.stepCheckFolder(ctx, j)
	}
	if next, parked := p.fleet.Starting(j); parked {
		return next, nil
	}
	p.open.drop(j.ID)
	jf, err := p.openJob(j)
	if err != nil {
		if next, ok, perr := p.fleet.Gone(j, err); ok || perr != nil {
			return next, perr
		}
		return j, err
	}
	keep := false
	defer func() {
		if !keep {
			jf.Close()
		}
	}()
	if !statMatches(jf.Info, j) {
		return p.workerChanged(j, jf.Info, "file changed since it was seen; waiting until it settles")
	}
	// The watcher judged the size when it found the file; one that grew
	// since (a sparse terabyte written over it) is held to the bounds here.
	lo, hi := p.bounds(j.Root)
	if why := FileOutsideBounds(j.Path, jf.Info.Size(), lo, hi); why != "" {
		return j, &step.FileError{Err: errors.New(why)}
	}
	info, err := splatfile.CheckFile(jf.F, j.Path)
	if errors.Is(err, splatfile.ErrIncomplete) {
		return j, &workerIncomplete{err: err, changed: j.ModTime}
	}
	if err != nil {
		return j, err
	}
	// The hash and the encoding are the long part of the check (minutes
	// for a multi-GB file on a slow share) and have no side effect to
	// finish: they stop as soon as the pool drains, and the job stays
	// queued.
	hctx, stop := p.untilDrain(ctx)
	defer stop()
	sum, changed, err := p.hashOf(ctx, hctx, j, jf)
	if err != nil {
		return j, err
	}
	if changed != nil {
		return p.workerChanged(j, changed, "file changed while it was hashed; waiting until it settles")
	}
	if next, parked, err := p.fleet.Hashed(j, sum); parked || err != nil {
		return next, err
	}
	next, keep, err := p.readyChecked(ctx, hctx, j, jf, sum, info.Kind)
	return next, err
}

// hashOf is the SHA-256 of jf, j's file. A job back here with a hash
// (waiting for a twin in flight, or retried) keeps it while the file is
// the one hashed: a multi-GB file is not read again every DedupeWait
// (workerChanged clears the hash). changed is the file's new state when
// it changed while it was hashed.
func (p *Pool) hashOf(ctx, hctx context.Context, j state.Job, jf *step.File) (sum string, changed fs.FileInfo, err error) {
	if j.SHA256 != "" && step.IsRecorded(jf.Info, j) {
		return j.SHA256, nil, nil
	}
	m := p.startCheck(j, CheckHashing, jf.Info.Size())
	sum, err = jf.Hash(hctx, m)
	m.Stop()
	if err != nil {
		return "", nil, step.Drained(ctx, hctx, err)
	}
	fi2, err := jf.Restat()
	if err != nil {
		return "", nil, err
	}
	if !statMatches(fi2, j) {
		return "", fi2, nil
	}
	return sum, nil, nil
}

// readyChecked moves j, its file jf checked as kind and hashed as sum, to
// ready with its publish parameters and its encoding, and keeps jf for
// the upload (kept); one that changed while it was encoded waits instead.
func (p *Pool) readyChecked(ctx, hctx context.Context, j state.Job, jf *step.File, sum string, kind splatfile.Kind) (next state.Job, kept bool, err error) {
	id := trustfs.IDOf(jf.Info)
	params, err := p.publish.Load().files.Params(j.Path, j.Root, j.ModTime)
	if err != nil {
		return j, false, &step.FileError{Err: fmt.Errorf("publish parameters: %w", err)}
	}
	checked := j
	checked.SHA256, checked.Kind, checked.Params = sum, string(kind), params
	enc, skipped, changed, err := p.encodeForUpload(hctx, checked, jf)
	if err != nil {
		return j, false, step.Drained(ctx, hctx, err)
	}
	if changed != nil {
		next, err := p.workerChanged(j, changed, "file changed while it was encoded; waiting until it settles")
		return next, false, err
	}
	j.Encoded, j.EncodeSkipped = enc, skipped
	now := p.o.Now()
	if err := j.Move(state.Ready, now); err != nil {
		return j, false, err
	}
	j.SHA256, j.Kind, j.Params = sum, string(kind), params
	j.Dev, j.Ino = id.Dev, id.Ino
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	p.open.put(j.ID, jf) // uploadFile sets what the upload must read from the job
	return j, true, nil
}
