package uploader

import (
	"context"
	"fmt"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/step"
)

// onError turns a step's error into the job to commit (same stage later,
// back to sign, or failed), or returns an error when nothing must be
// committed (shutdown, 401). What to do is the one retry rule's decision
// (state.Policy.Decide), shared with the one-shot commands and the prober.
func (p *Pool) onError(ctx context.Context, j state.Job, err error) (state.Job, error) {
	now := p.o.Now()
	d := p.policy.Decide(ctx, err, j.Attempts+1, now)
	switch d.Action {
	case state.Stop:
		return j, err
	case state.PauseToken:
		p.token.Pause(err)
		p.log.Warn().Uint64("job", j.ID).Str("stage", string(j.Stage)).Err(err).Msg("API refused the token: pausing all workers")
		return j, errWorkerPaused
	case state.Fail:
		j = p.env.Fail(j, now, err)
		if d.Reason != "" {
			j.FailReason = d.Reason
		}
		return j, nil
	case state.WaitConfig:
		// Not the job's fault and not its attempt: the job shows why it
		// waits (splatd jobs) and the whole pool pauses.
		// The pause keeps every worker waiting: the job is due when it
		// ends, by itself or by ConfigChanged.
		p.cfg.Pause(d, err)
		j.NextAttempt = now
		j.LastError, j.LastStatus = fmt.Sprintf("waiting: configuration error (%s): %v", d.Kind, err), 0
		return j, nil
	case state.Resign:
		// Signing again moves the job back a stage, which resets Attempts:
		// the refusals of fresh URLs in a row are counted apart, so that a
		// storage that keeps refusing them is backed off, not hammered.
		d = p.policy.Decide(ctx, err, j.Resigns+1, now)
		if d.Action == state.Fail { // a bounded patience's tries are spent
			j = p.env.Fail(j, now, err)
			j.FailReason = d.Reason
			return j, nil
		}
		p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Int("refusals", j.Resigns+1).
			Float64("retry_in_s", d.Delay.Seconds()).Err(err).Msg("storage refused the signed URL; signing a new one")
		next, rerr := step.Resign(j, now, now.Add(d.Delay), err.Error())
		next.Resigns = j.Resigns + 1
		return next, rerr
	case state.WaitFile:
		j.Attempts++
		j.NextAttempt = now.Add(d.Delay)
		j.LastError, j.LastStatus = err.Error(), 0
		return j, nil
	}
	j.Attempts++
	j.LastError, j.LastStatus = err.Error(), state.HTTPStatus(err)
	j.NextAttempt = now.Add(d.Delay)
	p.log.Warn().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("stage", string(j.Stage)).Int("attempt", j.Attempts).
		Float64("retry_in_s", d.Delay.Seconds()).Err(err).Msg("transient error; will retry")
	return j, nil
}

// policyOf is the one retry rule with the pool's patience.
func policyOf(t Timing) state.Policy {
	return state.Policy{Patience: t.Patience, Rand: t.Rand, Settle: t.Settle, IncompleteTimeout: t.IncompleteTimeout,
		RefusedGrace: t.RefusedGrace, MaxServerWait: t.MaxServerWait}
}
