package uploader

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/fleet"
)

// The after-action of a final job (receipt, move, delete) is a stage of
// its own: a failure is recorded on the job, counted, and retried on the
// after-action patience without a restart, never only at the next start.

// afterRecorder is the store method the after-action stage uses to record
// a failure on the job (queue.Store has it). A store without it still gets
// the retries, tracked in memory only.
type afterRecorder interface {
	RecordAfterError(id uint64, action, msg string, retry time.Time) (state.Job, error)
}

// afterActioner is what an after-action error says about itself
// (after.ActionError); others are counted as "other".
type afterActioner interface{ AfterAction() string }

// afterState tracks the final jobs whose after-action failed.
type afterState struct {
	mu      sync.Mutex
	pending map[uint64]afterPending
	running map[uint64]bool // Finish in progress: never twice at once
	wake    chan struct{}
}

type afterPending struct {
	path, action, err string
	n                 int
	next              time.Time
}

func newAfterState() afterState {
	return afterState{pending: make(map[uint64]afterPending), running: make(map[uint64]bool), wake: make(chan struct{}, 1)}
}

// runFinish runs After.Finish for final job j and marks it finalized; a
// failure is recorded on the job, counted and retried by afterLoop.
func (p *Pool) runFinish(ctx context.Context, j state.Job) {
	a := &p.after
	a.mu.Lock()
	if a.running[j.ID] {
		a.mu.Unlock()
		return
	}
	a.running[j.ID] = true
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.running, j.ID)
		a.mu.Unlock()
	}()
	// A job done from a peer's receipt: the peer ran the after-action.
	if p.o.After != nil && !fleet.FromPeer(j) {
		if err := p.o.After.Finish(ctx, j); err != nil {
			p.afterFailed(ctx, j, err)
			return
		}
	}
	if err := p.o.Store.MarkFinalized(j.ID); err != nil {
		p.log.Error().Uint64("job", j.ID).Err(err).Msg("cannot record after-action")
		return
	}
	a.mu.Lock()
	_, was := a.pending[j.ID]
	delete(a.pending, j.ID)
	a.mu.Unlock()
	if was {
		p.log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Msg("after-action done after earlier failures")
	}
}

func (p *Pool) afterFailed(ctx context.Context, j state.Job, err error) {
	if ctx.Err() != nil {
		return // shutdown: Unfinalized runs it again at the next start
	}
	action := "other"
	var aa afterActioner
	if errors.As(err, &aa) {
		action = aa.AfterAction()
	}
	a := &p.after
	a.mu.Lock()
	n := max(a.pending[j.ID].n, j.AfterAttempts) + 1
	a.mu.Unlock()
	// The one retry rule, with the after-actions' patience (never given up).
	d := p.policy.DecideAs(state.ProfileAfter, ctx, err, n, p.o.Now())
	if d.Action == state.Stop {
		return
	}
	next := p.o.Now().Add(d.Delay)
	p.o.Observer.AfterActionError(action)
	a.mu.Lock()
	a.pending[j.ID] = afterPending{path: j.Path, action: action, err: err.Error(), n: n, next: next}
	a.mu.Unlock()
	if rec, ok := p.o.Store.(afterRecorder); ok {
		if _, rerr := rec.RecordAfterError(j.ID, action, err.Error(), next); rerr != nil {
			p.log.Error().Uint64("job", j.ID).Err(rerr).Msg("cannot record the after-action failure")
		}
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
	p.log.Error().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("action", action).Int("attempt", n).
		Float64("retry_in_s", d.Delay.Seconds()).Err(err).Msg("after-action failed; retried on its own backoff")
}

// afterLoop retries failed after-actions when they are due, until ctx ends.
func (p *Pool) afterLoop(ctx context.Context) error {
	a := &p.after
	for {
		wait := time.Hour
		a.mu.Lock()
		for _, pe := range a.pending {
			wait = min(wait, max(pe.next.Sub(p.o.Now()), 0))
		}
		a.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-a.wake:
			t.Stop()
			continue
		case <-t.C:
		}
		now := p.o.Now()
		due := map[uint64]bool{}
		a.mu.Lock()
		for id, pe := range a.pending {
			if !pe.next.After(now) {
				due[id] = true
			}
		}
		a.mu.Unlock()
		if len(due) == 0 {
			continue
		}
		jobs, err := p.o.Store.Unfinalized()
		if err != nil {
			p.log.Error().Err(err).Msg("list pending after-actions; tried again later")
			a.mu.Lock()
			for id := range due {
				pe := a.pending[id]
				pe.next = now.Add(p.policy.Wait(state.ProfileAfter, pe.n))
				a.pending[id] = pe
			}
			a.mu.Unlock()
			continue
		}
		for _, j := range jobs {
			if due[j.ID] {
				delete(due, j.ID)
				p.runFinish(ctx, j)
			}
		}
		// The rest were finalized or retried by an operator meanwhile.
		a.mu.Lock()
		for id := range due {
			delete(a.pending, id)
		}
		a.mu.Unlock()
	}
}

// AfterErrors describes the final jobs whose after-action keeps failing
// (for /readyz's degraded line), nil when there are none.
func (p *Pool) AfterErrors() error {
	a := &p.after
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 {
		return nil
	}
	ids := make([]uint64, 0, len(a.pending))
	for id := range a.pending {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var parts []string
	for _, id := range ids[:min(len(ids), 3)] {
		pe := a.pending[id]
		parts = append(parts, fmt.Sprintf("job %d %s: %s", id, pe.action, pe.err))
	}
	more := ""
	if len(ids) > 3 {
		more = fmt.Sprintf("; and %d more (splatd jobs)", len(ids)-3)
	}
	return fmt.Errorf("after-actions failing for %d job(s), retried with backoff: %s%s", len(ids), strings.Join(parts, "; "), more)
}

// finished reports a job that just became final and runs its after-action stage.
func (p *Pool) finished(ctx context.Context, j state.Job) {
	result := string(j.Stage)
	if j.DuplicateOf != 0 {
		result = "duplicate"
	}
	p.o.Observer.JobFinished(result, p.o.Now().Sub(j.CreatedAt))
	p.fleet.Finished(j)
	p.finalize(ctx, j)
}

// finalize runs the after-action stage of a final job (afterstage.go),
// after removing its encoding (made again if the job is ever sent again).
func (p *Pool) finalize(ctx context.Context, j state.Job) {
	content.DropEncoded(j)
	p.runFinish(ctx, j)
}

// finishPending runs the after-action stage of jobs that became final before a
// crash interrupted it.
func (p *Pool) finishPending(ctx context.Context) error {
	jobs, err := p.o.Store.Unfinalized()
	if err != nil {
		return fmt.Errorf("list unfinished after-actions: %w", err)
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			return nil
		}
		p.finalize(ctx, j)
	}
	return nil
}
