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
)

// This file holds two conditions that must never look healthy while work
// waits: a configuration error (the retry rule's WaitConfig: TLS, DNS, a
// host refusing for too long), which pauses every worker and is retried on
// the ConfigPause backoff until it clears; and the after-action stage of a
// final job (receipt, move, delete), whose failure is recorded on the job,
// counted, and retried on AfterBackoff without a restart.

// policyOf is the one retry rule with the pool's patience.
func policyOf(o PoolOptions) state.Policy {
	return state.Policy{Backoff: o.Backoff, Settle: o.Settle, IncompleteTimeout: o.IncompleteTimeout,
		RefusedGrace: o.RefusedGrace, ConfigBackoff: o.ConfigBackoff}
}

// afterRecorder is the store method the after-action stage uses to record
// a failure on the job (queue.Store has it). A store without it still gets
// the retries, tracked in memory only.
type afterRecorder interface {
	RecordAfterError(id uint64, action, msg string, retry time.Time) (state.Job, error)
}

// afterObserver and configObserver are the metrics hooks of the two
// conditions (metrics.Metrics implements both).
type afterObserver interface {
	AfterActionError(action string)
}

type configObserver interface {
	ConfigError(kind string, active bool)
}

// afterActioner is what an after-action error says about itself
// (after.ActionError); others are counted as "other".
type afterActioner interface{ AfterAction() string }

// configState is the configuration error pause.
type configState struct {
	mu    sync.Mutex
	err   error // the last configuration error, until a network step succeeds
	kind  string
	since time.Time
	n     int           // pauses in a row
	until chan struct{} // non-nil while paused; closed when the pause ends
}

// pauseConfig records a WaitConfig decision and pauses every worker for the
// next ConfigPause step; when it ends the workers try again by themselves
// (the real work is the probe: a TLS error on the storage host is seen only
// there).
func (p *Pool) pauseConfig(d state.Decision, err error) time.Duration {
	c := &p.cfg
	c.mu.Lock()
	defer c.mu.Unlock()
	obs, _ := p.o.Observer.(configObserver)
	if c.err == nil || c.kind != d.Kind {
		if c.err == nil {
			c.since = p.o.Now()
		} else if obs != nil {
			obs.ConfigError(c.kind, false)
		}
		if obs != nil {
			obs.ConfigError(d.Kind, true)
		}
		p.log.Error().Str("kind", d.Kind).Err(err).Msg("configuration error no retry can fix: all work is paused and tried again with backoff; " + configAdvice(d.Kind))
	}
	c.err, c.kind = err, d.Kind
	if c.until != nil {
		return 0
	}
	c.n++
	delay := p.policy.ConfigPause(c.n)
	ch := make(chan struct{})
	c.until = ch
	time.AfterFunc(delay, func() {
		c.mu.Lock()
		close(ch)
		c.until = nil
		c.mu.Unlock()
		p.Wake()
	})
	return delay
}

// configPausedChan returns a channel closed when the configuration pause
// ends, or nil when there is none.
func (p *Pool) configPausedChan() <-chan struct{} {
	p.cfg.mu.Lock()
	defer p.cfg.mu.Unlock()
	if p.cfg.until == nil {
		return nil
	}
	return p.cfg.until
}

// configCleared ends the configuration error once a step that talks to the
// API or storage succeeded.
func (p *Pool) configCleared(from state.Stage) {
	switch from {
	case state.Ready, state.Signed, state.Publishing, state.Processing:
	default:
		return // no network in this step: it proves nothing
	}
	c := &p.cfg
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		return
	}
	if obs, ok := p.o.Observer.(configObserver); ok {
		obs.ConfigError(c.kind, false)
	}
	p.log.Info().Str("kind", c.kind).Float64("after_s", p.o.Now().Sub(c.since).Seconds()).Msg("the configuration error cleared: work resumed")
	c.err, c.kind, c.n = nil, "", 0
}

// ConfigError returns the configuration error that pauses the workers, its
// kind (state.ConfigTLS, ConfigDNS, ConfigRefused) and since when; err is
// nil when there is none.
func (p *Pool) ConfigError() (err error, kind string, since time.Time) {
	p.cfg.mu.Lock()
	defer p.cfg.mu.Unlock()
	return p.cfg.err, p.cfg.kind, p.cfg.since
}

func configAdvice(kind string) string {
	switch kind {
	case state.ConfigTLS:
		return "the server's certificate does not verify: set api.ca_file to the CA that signed it (a proxy's, a private CA's), or fix the certificate"
	case state.ConfigDNS:
		return "the host name does not resolve: check api.base_url and the machine's DNS"
	case state.ConfigRefused:
		return "the host keeps refusing connections: check api.base_url's port and that the service (or a proxy) runs"
	}
	return "check the configuration"
}

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

// runFinish runs the Finish hook of final job j and marks it finalized; a
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
	if p.o.Finish != nil && !fromPeer(j) {
		if err := p.o.Finish(ctx, j); err != nil {
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
		p.log.Info().Uint64("job", j.ID).Str("path", j.Path).Msg("after-action done after earlier failures")
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
	// The one retry rule, with the after-actions' own patience: whatever it
	// says, a final job's after-action is tried again, never given up.
	d := state.Policy{Backoff: p.o.AfterBackoff}.Decide(ctx, err, n, p.o.Now())
	if d.Action == state.Stop {
		return
	}
	next := p.o.Now().Add(d.Delay)
	if obs, ok := p.o.Observer.(afterObserver); ok {
		obs.AfterActionError(action)
	}
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
	p.log.Error().Uint64("job", j.ID).Str("path", j.Path).Str("action", action).Int("attempt", n).
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
				pe.next = now.Add(p.o.AfterBackoff.Delay(pe.n))
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
