package step

import (
	"errors"
	"fmt"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/splatfile"
)

// Move moves j to stage `to`, due now, with why as its last error.
func (e *Env) Move(j state.Job, to state.Stage, why string) (state.Job, error) {
	now := e.Now()
	if err := j.Move(to, now); err != nil {
		return j, err
	}
	j.NextAttempt, j.LastError, j.LastStatus = now, why, 0
	return j, nil
}

// Resign drops the signed URL so that the job signs again at the time at.
func Resign(j state.Job, now, at time.Time, why string) (state.Job, error) {
	if err := j.Move(state.Ready, now); err != nil {
		return j, err
	}
	j.Upload = state.Upload{}
	j.NextAttempt, j.LastError = at, why
	return j, nil
}

// Published moves j to processing with its splat's id, due for its first
// poll (both protocols).
func (e *Env) Published(j state.Job, now time.Time, splatID string) (state.Job, error) {
	if err := j.Move(state.Processing, now); err != nil {
		return j, err
	}
	j.Uncertain = false
	j.SplatID = splatID
	pub := now
	j.PublishedAt = &pub
	j.NextAttempt, j.LastError, j.LastStatus = now.Add(e.Timing.PollInterval), "", 0
	return j, nil
}

// PollTimedOut fails j when processing has run past PollTimeout.
func (e *Env) PollTimedOut(j state.Job, now time.Time) (state.Job, bool) {
	if j.PublishedAt == nil || now.Sub(*j.PublishedAt) <= e.Timing.PollTimeout {
		return j, false
	}
	return e.Fail(j, now, fmt.Errorf("processing did not finish within %s; last status %q", e.Timing.PollTimeout, j.TaskStatus)), true
}

// Polled acts on a poll's answer, for either protocol: done (at
// completedAt, when the server says), failed with failure, or polled again
// with backoff (an unknown status is logged and kept as the last error).
func (e *Env) Polled(j state.Job, now time.Time, outcome api.Outcome, status string, completedAt *time.Time, failure error) (state.Job, error) {
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
		return e.Fail(j, now, failure), nil
	case api.OutcomeUnknown:
		e.Log.Warn().Uint64("job", j.ID).Str("splat", j.SplatID).Str("status", status).Msg("unknown processing status; polling on")
		j.LastError = fmt.Sprintf("unknown processing status %q", status)
	}
	// A poll answered is no failed attempt (Attempts counts those alone, in
	// every stage): the next one waits as long as processing has lasted,
	// from PollInterval to PollMaxInterval, which doubles the pause at each poll.
	j.Attempts = 0
	j.NextAttempt = now.Add(min(max(now.Sub(j.StageSince), e.Timing.PollInterval), e.Timing.PollMaxInterval))
	return j, nil
}

// Fail moves j to failed for err, with the reason of the stage it failed in.
func (e *Env) Fail(j state.Job, now time.Time, err error) state.Job {
	from := j.Stage
	if merr := j.Move(state.Failed, now); merr != nil {
		// Every non-final stage may fail; this is a table bug.
		e.Log.Error().Err(merr).Msg("cannot fail job")
		return j
	}
	j.FailReason = FailReason(from, err)
	j.LastError, j.LastStatus = err.Error(), state.HTTPStatus(err)
	j.NextAttempt = now
	return j
}

// FailReason is the one line an operator reads in receipts, `splatd jobs`
// and the logs: what was wrong, in the words of whoever said so (the content
// check, or the server's error text with the route and status).
func FailReason(from state.Stage, err error) string {
	var inv *splatfile.InvalidError
	if errors.As(err, &inv) {
		return "invalid file: " + inv.Reason
	}
	var ae *api.APIError
	if errors.As(err, &ae) {
		return ae.Error()
	}
	var fe *FileError // a sidecar, a vanished file: the text says it all
	if errors.As(err, &fe) {
		return fe.Error()
	}
	return fmt.Sprintf("%v (at stage %s)", err, from)
}
