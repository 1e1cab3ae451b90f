package uploader

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/watcher/trustfs"
)

// step performs the side effect of j's stage and returns the job to
// commit. An error is classified by the caller (retry, fail, pause).
func (p *Pool) step(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if p.usesV1(j) {
		return p.stepV1(ctx, t, j)
	}
	switch j.Stage {
	case state.Queued:
		return p.stepCheck(ctx, j)
	case state.Ready:
		return p.stepSign(ctx, t, j)
	case state.Signed:
		return p.stepPut(ctx, j)
	case state.Uploaded:
		// Commit the intent before the publish call: a crash after this
		// commit is the one case whose outcome is unknown. The rate-limit
		// slot is taken first, so that the intent is committed only when
		// the call can leave at once: a crash while the pacer delays the
		// call leaves the job in uploaded, with nothing uncertain.
		// A shutdown while the slot is awaited ends the wait: the publish
		// has not started, so the job simply stays uploaded.
		rctx, cancel := p.untilDrain(ctx)
		err := t.Reserve(rctx, api.RoutePublish, false)
		cancel()
		if err != nil {
			if errors.Is(context.Cause(rctx), errDrained) && ctx.Err() == nil {
				return j, errDrained
			}
			return j, err
		}
		// The file may have changed while the job waited here (for a slot,
		// a 401 pause, a restart): uploaded content that is no longer the
		// file's is never published. Enqueue refused the new version
		// because this job was still in flight, so it is this job's to redo.
		fi, err := p.checkName(j)
		if err == nil && !isRecordedFile(fi, j) {
			t.Unreserve()
			return p.workerChanged(j, fi, "file changed after its upload; hashing it again")
		}
		if err != nil {
			t.Unreserve()
			return j, err
		}
		next := j
		if err := next.Move(state.Publishing, p.o.Now()); err != nil {
			t.Unreserve()
			return j, err
		}
		next.Uncertain = false
		next.NextAttempt = p.o.Now()
		return next, nil // the publish step's request takes the slot
	case state.Publishing:
		return p.stepPublish(ctx, t, j)
	case state.Processing:
		return p.stepPoll(ctx, t, j)
	}
	return j, fmt.Errorf("job %d: no step for stage %s", j.ID, j.Stage)
}

// workerFileError is a problem with the file that retrying cannot fix
// (gone, not a regular file): it fails the job like an invalid file.
type workerFileError struct{ err error }

func (e *workerFileError) Error() string { return e.err.Error() }
func (e *workerFileError) Unwrap() error { return e.err }
func (e *workerFileError) Invalid() bool { return true }

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
	if next, parked := p.shareStarting(j); parked {
		return next, nil
	}
	p.open.drop(j.ID)
	jf, err := p.openJob(j)
	if err != nil {
		if next, ok, perr := p.goneToPeer(j, err); ok || perr != nil {
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
	if !statMatches(jf.fi, j) {
		return p.workerChanged(j, jf.fi, "file changed since it was seen; waiting until it settles")
	}
	// The watcher judged the size when it found the file; one that grew
	// since (a sparse terabyte written over it) is held to the bounds here.
	lo, hi := p.bounds(j.Root)
	if why := FileOutsideBounds(j.Path, jf.fi.Size(), lo, hi); why != "" {
		return j, &workerFileError{errors.New(why)}
	}
	info, err := splatfile.CheckFile(jf.f, j.Path)
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
	if next, parked, err := p.shareWait(j, sum); parked || err != nil {
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
func (p *Pool) hashOf(ctx, hctx context.Context, j state.Job, jf *jobFile) (sum string, changed fs.FileInfo, err error) {
	if j.SHA256 != "" && isRecordedFile(jf.fi, j) {
		return j.SHA256, nil, nil
	}
	m := p.startCheck(j, CheckHashing, jf.fi.Size())
	sum, err = jf.hash(hctx, m)
	m.stop()
	if err != nil {
		return "", nil, drained(ctx, hctx, err)
	}
	fi2, err := jf.restat()
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
func (p *Pool) readyChecked(ctx, hctx context.Context, j state.Job, jf *jobFile, sum string, kind splatfile.Kind) (next state.Job, kept bool, err error) {
	id := trustfs.IDOf(jf.fi)
	params, err := p.publish.Load().files.Params(j.Path, j.Root, j.ModTime)
	if err != nil {
		return j, false, &workerFileError{fmt.Errorf("publish parameters: %w", err)}
	}
	checked := j
	checked.SHA256, checked.Kind, checked.Params = sum, string(kind), params
	enc, skipped, changed, err := p.encodeForUpload(hctx, checked, jf)
	if err != nil {
		return j, false, drained(ctx, hctx, err)
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

// drained is err, or errDrained when hctx, a check's context (untilDrain),
// ended because the pool drains while ctx runs on.
func drained(ctx, hctx context.Context, err error) error {
	if errors.Is(context.Cause(hctx), errDrained) && ctx.Err() == nil {
		return errDrained
	}
	return err
}

// emptySHA256 is the sha256 of no bytes.
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// stepSign: ready → signed.
func (p *Pool) stepSign(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if err := splatfile.Kind(j.Kind).CheckLegacy(); err != nil {
		return j, &workerFileError{err}
	}
	up, err := p.o.Client.Paced(t).SignedURL(ctx, uploadName(j))
	if err != nil {
		return j, err
	}
	// The age check before the PUT uses the pool's clock: stamp with it.
	now := p.o.Now()
	up.IssuedAt = now
	if err := j.Move(state.Signed, now); err != nil {
		return j, err
	}
	j.Upload = state.Upload{URL: up.URL, Key: up.Key, KeyField: up.KeyField, IssuedAt: up.IssuedAt}
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	return j, nil
}

// stepPut: signed → uploaded. The file must have the size and mtime it was
// hashed with before and after the PUT; otherwise the upload is stale and
// the job goes back to queued. An old URL, or one storage refuses, is
// signed again (back to ready).
func (p *Pool) stepPut(ctx context.Context, j state.Job) (state.Job, error) {
	now := p.o.Now()
	if now.Sub(j.Upload.IssuedAt) > p.o.Timing.URLMaxAge {
		return p.resign(j, now, "signed URL is older than "+p.o.Timing.URLMaxAge.String())
	}
	jf, changed, err := p.uploadFile(j)
	if err != nil {
		return j, err
	}
	if changed != nil {
		return p.workerChanged(j, changed, "file changed before upload; hashing again")
	}
	defer jf.Close()
	size := jf.size
	pr := &Progress{Path: j.Path, Size: size}
	p.setProgress(j.ID, pr)
	defer p.setProgress(j.ID, nil)
	body := newVerifyReader(jf.f, size, jf.want)
	err = p.o.Client.Put(ctx, j.Upload.URL, body, size, func(sent int64) {
		p.setProgress(j.ID, &Progress{Path: j.Path, Sent: sent, Size: size})
	})
	if body.mismatch || (j.Size == 0 && j.SHA256 != emptySHA256) {
		// The PUT never got the last bytes; what storage holds is not
		// published (the job hashes the file again and uploads anew).
		fi, serr := jf.restat()
		if serr != nil {
			return j, serr
		}
		return p.workerChanged(j, fi, "file content changed during upload (its sha256 differs from the one hashed); hashing again")
	}
	if err != nil {
		return j, err // storage refusing the URL: the retry rule re-signs
	}
	if err := p.hook("put", j); err != nil {
		return j, err
	}
	fi, err := jf.restat()
	if err != nil {
		return j, err
	}
	if !jf.unchanged(fi, j) {
		return p.workerChanged(j, fi, "file changed during upload; uploading again")
	}
	now = p.o.Now()
	j.Resigns = 0
	if err := j.Move(state.Uploaded, now); err != nil {
		return j, err
	}
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	return j, nil
}

// resign drops the signed URL so that the job signs again at the time at.
func (p *Pool) resign(j state.Job, at time.Time, why string) (state.Job, error) {
	if err := j.Move(state.Ready, p.o.Now()); err != nil {
		return j, err
	}
	j.Upload = state.Upload{}
	j.NextAttempt, j.LastError = at, why
	return j, nil
}

// stepPublish: publishing → processing. A job whose earlier publish call
// may have reached the API (found here after a restart, or after a lost
// answer) follows OnUncertain.
func (p *Pool) stepPublish(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	now := p.o.Now()
	if j.Uncertain {
		if p.publish.Load().onUncertain == UncertainHold {
			if err := j.Move(state.Held, now); err != nil {
				return j, err
			}
			j.TaskMessage = "publish outcome unknown (interrupted publish call): check the account's splats, then `splatd retry " +
				fmt.Sprint(j.ID) + "` to publish again"
			j.FailReason = j.TaskMessage
			return j, nil
		}
		p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Msg("publish outcome unknown; publishing again (publish.on_uncertain: republish)")
	}
	sp, err := p.o.Client.Paced(t).Publish(ctx, api.PublishRequest{Key: j.Upload.Key, KeyField: j.Upload.KeyField, PublishParams: j.Params})
	if _, parked := errors.AsType[*pace.Parked](err); parked {
		return j, err // not sent: nothing is uncertain
	}
	j.Publishes++
	if err != nil && p.policy.Decide(ctx, err, 1, now).Action == state.Hold {
		// A 2xx answer we cannot use (no id, not JSON): the splat most
		// likely exists, and publishing again would make another one each
		// time. Only an operator can tell; hold whatever on_uncertain says.
		if merr := j.Move(state.Held, now); merr != nil {
			return j, merr
		}
		j.TaskMessage = fmt.Sprintf("publish answered %v; the splat probably exists but its id is unknown: check the account's splats, then `splatd retry %d` to publish again", err, j.ID)
		j.FailReason = j.TaskMessage
		j.LastError = err.Error()
		return j, nil
	}
	if err != nil && state.HTTPStatus(err) == http.StatusTooManyRequests {
		// Refused before anything was created: back to uploaded, so the next
		// attempt reserves its slot and commits a fresh intent (a job found
		// in publishing at start is then always a truly uncertain one).
		if merr := j.Move(state.Uploaded, now); merr != nil {
			return j, merr
		}
		return j, err
	}
	if err != nil {
		// A 5xx or a lost connection may come after the splat was created:
		// the next attempt is uncertain. A refusal is not.
		if st := state.HTTPStatus(err); st == 0 || st >= 500 {
			if p.policy.Decide(ctx, err, 1, now).Action == state.Retry {
				j.Uncertain = true
			}
		}
		return j, err
	}
	j.SplatHash, j.ViewerURL = sp.Hash, sp.URL
	j.TaskStatus, j.TaskMessage = sp.Task.Status, sp.Task.Message
	// The call may have waited for its slot: poll and published_at count
	// from its answer.
	return p.published(j, p.o.Now(), sp.ID)
}

// published moves j to processing with its splat's id, due for its first
// poll (both protocols).
func (p *Pool) published(j state.Job, now time.Time, splatID string) (state.Job, error) {
	if err := j.Move(state.Processing, now); err != nil {
		return j, err
	}
	j.Uncertain = false
	j.SplatID = splatID
	pub := now
	j.PublishedAt = &pub
	j.NextAttempt, j.LastError, j.LastStatus = now.Add(p.o.Timing.Poll.Interval), "", 0
	return j, nil
}

// stepPoll: processing → done | failed, or processing again later.
func (p *Pool) stepPoll(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	now := p.o.Now()
	if j, timedOut := p.pollTimedOut(j, now); timedOut {
		return j, nil
	}
	sp, err := p.o.Client.Paced(t).Splat(ctx, j.SplatID)
	if err != nil {
		return j, err
	}
	j.TaskStatus, j.TaskMessage = sp.Task.Status, sp.Task.Message
	if sp.URL != "" {
		j.ViewerURL = sp.URL
	}
	if sp.Hash != "" {
		j.SplatHash = sp.Hash
	}
	msg := sp.Task.Message
	if msg == "" {
		msg = "(no message)"
	}
	return p.polled(j, now, sp.Outcome(), sp.Task.Status, sp.CompletedAt, fmt.Errorf("processing %s: %s", sp.Task.Status, msg))
}

// pollTimedOut fails j when processing has run past Poll.Timeout.
func (p *Pool) pollTimedOut(j state.Job, now time.Time) (state.Job, bool) {
	if j.PublishedAt == nil || now.Sub(*j.PublishedAt) <= p.o.Timing.Poll.Timeout {
		return j, false
	}
	return p.fail(j, now, fmt.Errorf("processing did not finish within %s; last status %q", p.o.Timing.Poll.Timeout, j.TaskStatus)), true
}

// polled acts on a poll's answer, for either protocol: done (at
// completedAt, when the server says), failed with failure, or polled again
// with backoff (an unknown status is logged and kept as the last error).
func (p *Pool) polled(j state.Job, now time.Time, outcome api.Outcome, status string, completedAt *time.Time, failure error) (state.Job, error) {
	switch outcome {
	case api.OutcomeDone:
		if err := j.Move(state.Done, now); err != nil {
			return j, err
		}
		done := now
		if completedAt != nil {
			done = *completedAt
		}
		j.CompletedAt = &done
		j.LastError, j.LastStatus = "", 0
		return j, nil
	case api.OutcomeFailed:
		return p.fail(j, now, failure), nil
	case api.OutcomeUnknown:
		p.log.Warn().Uint64("job", j.ID).Str("splat", j.SplatID).Str("status", status).Msg("unknown processing status; polling on")
		j.LastError = fmt.Sprintf("unknown processing status %q", status)
	}
	// A poll answered is no failed attempt (Attempts counts those alone, in
	// every stage): the next one waits as long as processing has lasted,
	// from Interval to MaxInterval, which doubles the pause at each poll.
	j.Attempts = 0
	j.NextAttempt = now.Add(min(max(now.Sub(j.StageSince), p.o.Timing.Poll.Interval), p.o.Timing.Poll.MaxInterval))
	return j, nil
}

// failReason is the one line an operator reads in receipts, `splatd jobs`
// and the logs: what was wrong, in the words of whoever said so (the content
// check, or the server's error text with the route and status).
func failReason(from state.Stage, err error) string {
	var inv *splatfile.InvalidError
	if errors.As(err, &inv) {
		return "invalid file: " + inv.Reason
	}
	var ae *api.APIError
	if errors.As(err, &ae) {
		return ae.Error()
	}
	var fe *workerFileError // a sidecar, a vanished file: the text says it all
	if errors.As(err, &fe) {
		return fe.Error()
	}
	return fmt.Sprintf("%v (at stage %s)", err, from)
}
