package content

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
	"github.com/splatd/splatd/watcher/trustfs"
)

// statMatches reports whether fi has the size and mtime j recorded (its
// inode is not compared: step.IsRecorded does).
func statMatches(fi fs.FileInfo, j state.Job) bool {
	return fi.Size() == j.Size && fi.ModTime().Equal(j.ModTime)
}

// Check: queued → ready. The file must be unchanged since it was last
// seen, pass the content check, and not change while it is hashed. It is
// opened once, through its watch folder, and that descriptor is checked,
// hashed and kept for the upload.
func (s *Source) Check(ctx context.Context, j state.Job) (state.Job, error) {
	if splatfile.IsSOGFolder(j.Path) {
		return s.checkFolder(ctx, j)
	}
	if next, parked := s.env.Fleet.Starting(j); parked {
		return next, nil
	}
	s.open.drop(j.ID)
	jf, err := s.openJob(j)
	if err != nil {
		if next, ok, perr := s.env.Fleet.Gone(j, err); ok || perr != nil {
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
		return s.Changed(j, jf.Info, "file changed since it was seen; waiting until it settles")
	}
	// The watcher judged the size when it found the file; one that grew
	// since (a sparse terabyte written over it) is checked against the bounds here.
	lo, hi := s.bounds(j.Root)
	if why := FileOutsideBounds(j.Path, jf.Info.Size(), lo, hi); why != "" {
		return j, &step.FileError{Err: errors.New(why)}
	}
	info, err := splatfile.CheckFile(jf.F, j.Path)
	if errors.Is(err, splatfile.ErrIncomplete) {
		return j, &incomplete{err: err, changed: j.ModTime}
	}
	if err != nil {
		return j, err
	}
	// The hash and the encoding are the long part of the check (minutes
	// for a multi-GB file on a slow share) and have no side effect to
	// finish: they stop as soon as the pool drains, and the job stays
	// queued.
	hctx, stop := s.env.UntilDrain(ctx)
	defer stop()
	sum, changed, err := s.hashOf(ctx, hctx, j, jf)
	if err != nil {
		return j, err
	}
	if changed != nil {
		return s.Changed(j, changed, "file changed while it was hashed; waiting until it settles")
	}
	if next, parked, err := s.env.Fleet.Hashed(j, sum); parked || err != nil {
		return next, err
	}
	next, keep, err := s.readyChecked(ctx, hctx, j, jf, sum, info.Kind)
	return next, err
}

// hashOf is the SHA-256 of jf, j's file. A job back here with a hash
// (waiting for a twin in flight, or retried) keeps it while the file is
// the one hashed: a multi-GB file is not read again every DedupeWait
// (Changed clears the hash). changed is the file's new state when
// it changed while it was hashed.
func (s *Source) hashOf(ctx, hctx context.Context, j state.Job, jf *step.File) (sum string, changed fs.FileInfo, err error) {
	if j.SHA256 != "" && step.IsRecorded(jf.Info, j) {
		return j.SHA256, nil, nil
	}
	m := s.env.Meter(j, Hashing, jf.Info.Size())
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
func (s *Source) readyChecked(ctx, hctx context.Context, j state.Job, jf *step.File, sum string, kind splatfile.Kind) (next state.Job, kept bool, err error) {
	id := trustfs.IDOf(jf.Info)
	params, err := s.env.Files().Params(j.Path, j.Root, j.ModTime)
	if err != nil {
		return j, false, &step.FileError{Err: fmt.Errorf("publish parameters: %w", err)}
	}
	checked := j
	checked.SHA256, checked.Kind, checked.Params = sum, string(kind), params
	enc, skipped, changed, err := s.encodeForUpload(hctx, checked, jf)
	if err != nil {
		return j, false, step.Drained(ctx, hctx, err)
	}
	if changed != nil {
		next, err := s.Changed(j, changed, "file changed while it was encoded; waiting until it settles")
		return next, false, err
	}
	j.Encoded, j.EncodeSkipped = enc, skipped
	now := s.env.Now()
	if err := j.Move(state.Ready, now); err != nil {
		return j, false, err
	}
	j.SHA256, j.Kind, j.Params = sum, string(kind), params
	j.Dev, j.Ino = id.Dev, id.Ino
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	s.open.put(j.ID, jf) // UploadFile sets what the upload must read from the job
	return j, true, nil
}
