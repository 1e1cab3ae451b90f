package uploader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/health"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/step"
)

// worker claims jobs and advances each as far as it can go without waiting
// (depth first: a started job finishes before new ones start hashing).
func (p *Pool) worker(ctx context.Context, n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.draining.Load() {
			return nil // claim nothing new
		}
		if ch := health.Until(p.token, p.cfg); ch != nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-p.drainCh:
			case <-ch:
			}
			continue
		}
		j, ok, err := p.o.Store.Claim(p.o.Now())
		if err != nil {
			if !p.store.Failed(ctx, fmt.Errorf("claim: %w", err), false) {
				return ctx.Err()
			}
			continue
		}
		p.store.Answered()
		if !ok {
			p.idle(ctx)
			continue
		}
		err = p.runJob(ctx, j)
		p.o.Store.Release(j.ID)
		switch {
		case err == nil || errors.Is(err, errWorkerPaused):
			// Each commit of the job told the store's health (commit).
		case ctx.Err() != nil || errors.Is(err, errWorkerCrash):
			return err
		default:
			// The store could not commit (a full disk, an I/O error). The
			// job stays at its last committed stage; the side effect is
			// redone when the store works again. Stopping the daemon would
			// only trade this for a restart loop.
			if !p.store.Failed(ctx, err, true) {
				return ctx.Err()
			}
		}
	}
}

// idle sleeps until the next job is due, a Wake, or a minute at most.
func (p *Pool) idle(ctx context.Context) {
	d := time.Minute
	if at, ok := p.o.Store.NextDue(); ok {
		d = min(d, max(at.Sub(p.o.Now()), time.Millisecond))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-p.drainCh:
	case <-p.wake:
	case <-t.C:
	}
}

var errWorkerPaused = errors.New("paused: the API refuses the token")

// errAborted ends the step of a job an operator changed meanwhile (Abort):
// its calls stop at once and their outcome is dropped.
var errAborted = errors.New("worker: job changed by an operator")

// Abort stops the step job id is running, if a worker holds it: its
// storage upload (legacy PUT, v1 part PUTs) is cut at once and nothing is
// committed. The daemon calls it after an operator canceled the job in the
// store, so that no more bytes go out for it.
func (p *Pool) Abort(id uint64) bool {
	p.runMu.Lock()
	defer p.runMu.Unlock()
	cancel, ok := p.running[id]
	if ok {
		cancel(errAborted)
	}
	return ok
}

// runJob advances a claimed job until it is final, waits, or the pool stops.
func (p *Pool) runJob(ctx context.Context, j state.Job) error {
	p.countParkedWait(j)
	t := p.o.Client.Pacer().Caller(j.ID, rateParkMin) // claimed again: no longer parked
	defer t.Unreserve()                               // unused if the job stopped after its intent
	jctx, cancel := context.WithCancelCause(ctx)
	p.runMu.Lock()
	p.running[j.ID] = cancel
	p.runMu.Unlock()
	defer func() {
		p.runMu.Lock()
		delete(p.running, j.ID)
		p.runMu.Unlock()
		cancel(nil)
	}()
	for {
		next, err := p.advance(jctx, t, j)
		if errors.Is(err, step.ErrDrained) {
			return nil
		}
		if errors.Is(err, state.ErrStale) || errors.Is(err, errAborted) {
			// An operator changed the job meanwhile (splatd cancel): the
			// step's outcome is dropped at this boundary and the job stays
			// as the operator left it.
			p.log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Msg("job changed by an operator; its step's outcome is dropped")
			return nil
		}
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		j = next
		if j.Stage.Final() || j.NextAttempt.After(p.o.Now()) || health.Until(p.token, p.cfg) != nil {
			return nil
		}
		// Draining stops after the current step, except between a fresh
		// publish intent and its call: stopping there would leave an
		// uncertain outcome where a moment's work settles it.
		if p.draining.Load() && !(j.Stage == state.Publishing && !j.Uncertain) {
			return nil
		}
	}
}

func (p *Pool) hook(point string, j state.Job) error {
	if p.o.workerHook == nil {
		return nil
	}
	if err := p.o.workerHook(point, j); err != nil {
		return fmt.Errorf("%w at %s: %w", errWorkerCrash, point, err)
	}
	return nil
}

// advance runs one step, its requests paced by t: the side effect of j's
// stage, then one commit.
func (p *Pool) advance(ctx context.Context, t *pace.Caller, j state.Job) (state.Job, error) {
	from, since := j.Stage, j.StageSince
	j.RateLimited = nil // each step says again whether the rate limit parks it
	next, err := p.step(ctx, t, j)
	parked, isParked := errors.AsType[*pace.Parked](err)
	if errors.Is(err, errWorkerCrash) || errors.Is(err, step.ErrDrained) {
		return j, err
	}
	if errors.Is(context.Cause(ctx), errAborted) {
		return j, errAborted // the operator's change stands; nothing to commit
	}
	if err == nil {
		p.cfg.Worked(from)
	}
	if isParked && ctx.Err() == nil {
		next, err = p.park(next, parked.Delay), nil // the request was not sent (ratepark.go)
	}
	if err != nil {
		// The step's job carries what the failed attempt changed (e.g. a
		// publish that may have reached the API marks it uncertain).
		next, err = p.onError(ctx, next, err)
		if err != nil {
			return j, err
		}
	}
	if herr := p.hook("effect:"+string(from), next); herr != nil {
		return j, herr
	}
	stored, err := p.commit(ctx, next, from)
	if err != nil {
		return j, fmt.Errorf("commit job %d %s→%s: %w", j.ID, from, next.Stage, err)
	}
	p.logTransition(stored, from, since)
	if stored.Stage != state.Ready && stored.Stage != state.Signed {
		p.content.Drop(stored.ID) // only a job still to upload keeps its descriptor
	}
	if herr := p.hook("commit:"+string(stored.Stage), stored); herr != nil {
		return stored, herr
	}
	if stored.Stage.Final() && !from.Final() {
		p.finished(ctx, stored)
	}
	return stored, nil
}

// commit stores the outcome of a step. A store that fails (a full disk)
// is retried with the store patience (state.ProfileStore) for as long as the pool runs, holding the
// outcome in memory: redoing the side effect instead could publish twice.
// Only a stale job or an illegal transition (logic errors) return at once.
func (p *Pool) commit(ctx context.Context, next state.Job, from state.Stage) (state.Job, error) {
	for {
		stored, err := p.o.Store.Commit(next, from)
		var te *state.TransitionError
		if err == nil || errors.Is(err, state.ErrStale) || errors.As(err, &te) {
			if err == nil {
				p.store.Advanced()
				p.content.DropBundle(stored)
			}
			return stored, err
		}
		if !p.store.Failed(ctx, fmt.Errorf("commit job %d %s→%s: %w", next.ID, from, next.Stage, err), true) {
			return state.Job{}, err
		}
	}
}

// logTransition logs a committed stage change and tells the Observer.
func (p *Pool) logTransition(j state.Job, from state.Stage, since time.Time) {
	if j.Stage == from {
		return
	}
	ev := p.log.Info()
	if j.Stage == state.Failed || j.Stage == state.Held {
		ev = p.log.Warn()
	}
	ev = ev.Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("stage", string(j.Stage)).Str("from", string(from)).
		Float64("took_s", p.o.Now().Sub(since).Seconds())
	switch j.Stage {
	case state.Processing, state.Done:
		ev = ev.Str("splat", j.SplatID).Str("url", j.ViewerURL)
	}
	if j.DuplicateOf != 0 {
		ev = ev.Uint64("duplicate_of", j.DuplicateOf)
	}
	if j.Stage == state.Failed {
		ev = ev.Str("reason", j.FailReason).Int("status", j.LastStatus)
	}
	if j.Stage == state.Held {
		ev = ev.Str("reason", j.TaskMessage)
	}
	ev.Msg("job " + string(j.Stage))
	p.o.Observer.Transition(j, from)
}
