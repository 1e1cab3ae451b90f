// Package legacy is the legacy protocol's steps from ready to processing:
// sign a URL, PUT the file, commit the publish intent, publish, poll
// (docs/architecture.md, "Job stages").
package legacy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step"
)

// Protocol is the legacy protocol's steps, run by the pool.
type Protocol struct {
	env *step.Env
	// hold reports whether publish.on_uncertain is hold (a reload may
	// change it).
	hold func() bool
}

// New returns the legacy steps over env.
func New(env *step.Env, hold func() bool) *Protocol {
	return &Protocol{env: env, hold: hold}
}

// Step performs the side effect of j's stage and returns the job to
// commit. An error is classified by the pool (retry, fail, pause).
func (p *Protocol) Step(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	switch j.Stage {
	case state.Ready:
		return p.sign(ctx, t, j)
	case state.Signed:
		return p.put(ctx, j)
	case state.Uploaded:
		return p.intent(ctx, t, j)
	case state.Publishing:
		return p.publish(ctx, t, j)
	case state.Processing:
		return p.poll(ctx, t, j)
	}
	return j, fmt.Errorf("job %d: no step for stage %s", j.ID, j.Stage)
}

// intent: uploaded → publishing. The intent is committed before the
// publish call: a crash after this commit is the one case whose outcome is
// unknown. The rate-limit slot is taken first, so that the intent is
// committed only when the call can leave at once: a crash while the pacer
// delays the call leaves the job in uploaded, with nothing uncertain. A
// shutdown while the slot is awaited ends the wait: the publish has not
// started, so the job simply stays uploaded.
func (p *Protocol) intent(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	rctx, cancel := p.env.Pool.UntilDrain(ctx)
	err := t.Reserve(rctx, api.RoutePublish, false)
	cancel()
	if err != nil {
		return j, step.Drained(ctx, rctx, err)
	}
	// The file may have changed while the job waited here (for a slot,
	// a 401 pause, a restart): uploaded content that is no longer the
	// file's is never published. Enqueue refused the new version
	// because this job was still in flight, so it is this job's to redo.
	fi, err := p.env.Pool.CheckName(j)
	if err == nil && !step.IsRecorded(fi, j) {
		t.Unreserve()
		return p.env.Pool.Changed(j, fi, "file changed after its upload; hashing it again")
	}
	if err != nil {
		t.Unreserve()
		return j, err
	}
	next := j
	if err := next.Move(state.Publishing, p.env.Now()); err != nil {
		t.Unreserve()
		return j, err
	}
	next.Uncertain = false
	next.NextAttempt = p.env.Now()
	return next, nil // the publish step's request takes the slot
}

// sign: ready → signed.
func (p *Protocol) sign(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	if err := splatfile.Kind(j.Kind).CheckLegacy(); err != nil {
		return j, &step.FileError{Err: err}
	}
	up, err := p.env.Client.Paced(t).SignedURL(ctx, step.UploadName(j))
	if err != nil {
		return j, err
	}
	// The age check before the PUT uses the pool's clock: stamp with it.
	now := p.env.Now()
	up.IssuedAt = now
	if err := j.Move(state.Signed, now); err != nil {
		return j, err
	}
	j.Upload = state.Upload{URL: up.URL, Key: up.Key, KeyField: up.KeyField, IssuedAt: up.IssuedAt}
	j.NextAttempt, j.LastError, j.LastStatus = now, "", 0
	return j, nil
}

// publish: publishing → processing. A job whose earlier publish call may
// have reached the API (found here after a restart, or after a lost
// answer) follows publish.on_uncertain.
func (p *Protocol) publish(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	now := p.env.Now()
	if j.Uncertain {
		if p.hold() {
			if err := j.Move(state.Held, now); err != nil {
				return j, err
			}
			j.TaskMessage = "publish outcome unknown (interrupted publish call): check the account's splats, then `splatd retry " +
				fmt.Sprint(j.ID) + "` to publish again"
			j.FailReason = j.TaskMessage
			return j, nil
		}
		p.env.Log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Msg("publish outcome unknown; publishing again (publish.on_uncertain: republish)")
	}
	sp, err := p.env.Client.Paced(t).Publish(ctx, api.PublishRequest{Key: j.Upload.Key, KeyField: j.Upload.KeyField, PublishParams: j.Params})
	if _, parked := errors.AsType[*pace.Parked](err); parked {
		return j, err // not sent: nothing is uncertain
	}
	j.Publishes++
	if err != nil {
		return p.publishFailed(ctx, j, now, err)
	}
	j.SplatHash, j.ViewerURL = sp.Hash, sp.URL
	j.TaskStatus, j.TaskMessage = sp.Task.Status, sp.Task.Message
	// The call may have waited for its slot: poll and published_at count
	// from its answer.
	return p.env.Published(j, p.env.Now(), sp.ID)
}

// publishFailed is the job to commit after a publish call that failed
// with err: held, back to uploaded, or retried (uncertain when the splat
// may have been created).
func (p *Protocol) publishFailed(ctx context.Context, j state.Job, now time.Time, err error) (state.Job, error) {
	if p.env.Policy.Decide(ctx, err, 1, now).Action == state.Hold {
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
	if state.HTTPStatus(err) == http.StatusTooManyRequests {
		// Refused before anything was created: back to uploaded, so the next
		// attempt reserves its slot and commits a fresh intent (a job found
		// in publishing at start is then always a truly uncertain one).
		if merr := j.Move(state.Uploaded, now); merr != nil {
			return j, merr
		}
		return j, err
	}
	// A 5xx or a lost connection may come after the splat was created:
	// the next attempt is uncertain. A refusal is not.
	if st := state.HTTPStatus(err); st == 0 || st >= 500 {
		if p.env.Policy.Decide(ctx, err, 1, now).Action == state.Retry {
			j.Uncertain = true
		}
	}
	return j, err
}

// poll: processing → done | failed, or processing again later.
func (p *Protocol) poll(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	now := p.env.Now()
	if j, timedOut := p.env.PollTimedOut(j, now); timedOut {
		return j, nil
	}
	sp, err := p.env.Client.Paced(t).Splat(ctx, j.SplatID)
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
	return p.env.Polled(j, now, sp.Outcome(), sp.Task.Status, sp.CompletedAt, fmt.Errorf("processing %s: %s", sp.Task.Status, msg))
}
