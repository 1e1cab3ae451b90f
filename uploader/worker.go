package uploader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Pool runs the workers that advance jobs. Each worker claims a job and
// moves it one stage per step, committing each stage before the side effect
// of the next, so a crash at any point resumes from the last commit.
type Pool struct {
	o      PoolOptions
	policy state.Policy // the one retry rule, with o.Patience and o.Settle
	log    zerolog.Logger
	wake   chan struct{}

	progMu   sync.Mutex
	progress map[uint64]*progressEntry // running uploads (progress.go)
	checks   map[uint64]*progressEntry // running hashes, bundles, encodings (progress.go)

	runMu   sync.Mutex
	running map[uint64]context.CancelCauseFunc // the jobs workers hold now, by id (Abort)

	encodeSlot chan struct{} // one publish.encode at a time (encode.go)

	draining atomic.Bool   // Run's ctx ended: finish the current step, start no other
	drainCh  chan struct{} // closed when draining starts

	store storeHealth // the job store while it fails (storehealth.go)

	authMu      sync.Mutex
	authErr     error         // non-nil while the token is refused
	authChanged chan struct{} // closed and replaced when authErr changes
	kick        chan struct{} // ConfigChanged: the prober probes now

	cfg     configState                     // a configuration error pauses the pool (configpause.go)
	after   afterState                      // failed after-actions and their retries (afterstage.go)
	publish atomic.Pointer[publishDefaults] // o.Files and o.OnUncertain, replaced by SetPublish
	held    heldFiles                       // each job's descriptor from its hash to its upload (jobfile.go)
	shares  *shares                         // the fleet's progress (share.go)
	fleet   Fleet                           // o.Peers' fleet; nil: no shares
	fs      *trustfs.FS                     // o.Files' trust boundary

	encodeDir, bundleDir string // under o.WorkDir (PoolOptions.dirs)
}

// publishDefaults are the publish settings a reload may change.
type publishDefaults struct {
	files       Files
	onUncertain string
}

// NewPool checks o and builds a pool; Run starts it.
func NewPool(o PoolOptions) (*Pool, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	p := &Pool{
		o:           o,
		policy:      policyOf(o.Timing),
		after:       newAfterState(),
		log:         o.Logger.With().Str("component", "worker").Logger(),
		wake:        make(chan struct{}, o.Workers),
		encodeSlot:  make(chan struct{}, 1),
		progress:    make(map[uint64]*progressEntry),
		checks:      make(map[uint64]*progressEntry),
		running:     make(map[uint64]context.CancelCauseFunc),
		drainCh:     make(chan struct{}),
		authChanged: make(chan struct{}),
		kick:        make(chan struct{}, 1),
		shares:      newShares(o.Now()),
	}
	if o.Peers != nil {
		p.fleet = o.Peers.Fleet()
	}
	p.encodeDir, p.bundleDir = o.dirs()
	p.fs = o.Files.FS()
	p.publish.Store(&publishDefaults{files: o.Files, onUncertain: o.OnUncertain})
	return p, nil
}

// SetPublish replaces the configuration's Files and the uncertain outcome
// rule, for a config reload. Jobs that become ready from now on use them;
// a job already ready keeps the parameters it resolved then.
func (p *Pool) SetPublish(files Files, onUncertain string) error {
	onUncertain, err := checkUncertain(onUncertain)
	if err != nil {
		return err
	}
	p.publish.Store(&publishDefaults{files: files, onUncertain: onUncertain})
	return nil
}

// errWorkerCrash stops the pool from a test hook, like a process death.
var errWorkerCrash = errors.New("worker: simulated crash")

// Run finishes the after-actions a crash interrupted, then runs the workers
// and the token prober until ctx ends, and drains:
//
//  1. When ctx ends, no worker claims a new job, and a publish still
//     waiting for its rate-limit slot gives up (nothing was sent).
//  2. Steps in flight finish their call and commit it, for up to Grace:
//     a publish call in flight returns its answer instead of leaving an
//     uncertain outcome for the next start.
//  3. After Grace, the calls still running are cancelled. Every stage was
//     committed before its side effect, so they resume from the last
//     commit at the next start.
//
// Run returns nil after a drain and an error only when the store fails.
func (p *Pool) Run(ctx context.Context) error {
	work, abort := context.WithCancel(context.WithoutCancel(ctx))
	defer abort()
	if err := p.finishPending(ctx); err != nil {
		return err
	}
	workersDone := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-workersDone:
			return
		}
		p.draining.Store(true)
		close(p.drainCh)
		p.Wake()
		grace := time.NewTimer(p.o.Timing.Grace)
		defer grace.Stop()
		select {
		case <-workersDone:
		case <-grace.C:
			p.log.Warn().Float64("grace_s", p.o.Timing.Grace.Seconds()).Msg("abandoning in-flight calls; they resume from the last committed stage at the next start")
			abort()
		}
	}()

	// The token prober and the after-action retries run beside the
	// workers and stop with them.
	helpers, stopHelpers := context.WithCancel(work)
	helpersDone := make(chan struct{}, 2)
	go func() { _ = p.authProber(helpers); helpersDone <- struct{}{} }()
	go func() { _ = p.afterLoop(helpers); helpersDone <- struct{}{} }()

	g, gctx := errgroup.WithContext(work)
	for i := range p.o.Workers {
		g.Go(func() error { return p.worker(gctx, i) })
	}
	err := g.Wait()
	p.held.closeAll()
	close(workersDone)
	stopHelpers()
	<-helpersDone
	<-helpersDone
	if errors.Is(err, context.Canceled) || errors.Is(err, errDrained) {
		return nil
	}
	return err
}

// errDrained ends a worker, or a step that had not started its side effect
// (a publish still waiting for its rate-limit slot), once the pool drains.
// Nothing is committed: the job stays where it was.
var errDrained = errors.New("worker: draining for shutdown")

// untilDrain returns a context that also ends when the pool starts draining.
func (p *Pool) untilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if p.draining.Load() { // ended already, not some time after the step began
		cancel(errDrained)
		return ctx, func() { cancel(nil) }
	}
	go func() {
		select {
		case <-p.drainCh:
			cancel(errDrained)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil) }
}

// Wake tells idle workers that a job was enqueued.
func (p *Pool) Wake() {
	for range p.o.Workers {
		select {
		case p.wake <- struct{}{}:
		default:
			return
		}
	}
}

// Paused returns the 401 error while the API refuses the token (all work
// is paused and the token is probed with backoff), nil otherwise.
func (p *Pool) Paused() error {
	p.authMu.Lock()
	defer p.authMu.Unlock()
	return p.authErr
}

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
		if ch := p.pausedChan(); ch != nil {
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
			if !p.storeTrouble(ctx, fmt.Errorf("claim: %w", err), false) {
				return ctx.Err()
			}
			continue
		}
		p.storeAnswered()
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
			if !p.storeTrouble(ctx, err, true) {
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
		if errors.Is(err, errDrained) {
			return nil
		}
		if errors.Is(err, state.ErrStale) || errors.Is(err, errAborted) {
			// An operator changed the job meanwhile (splatd cancel): the
			// step's outcome is dropped at this boundary and the job stays
			// as the operator left it.
			p.log.Info().Uint64("job", j.ID).Str("path", j.Path).Msg("job changed by an operator; its step's outcome is dropped")
			return nil
		}
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		j = next
		if j.Stage.Final() || j.NextAttempt.After(p.o.Now()) || p.pausedChan() != nil {
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
	if errors.Is(err, errWorkerCrash) || errors.Is(err, errDrained) {
		return j, err
	}
	if errors.Is(context.Cause(ctx), errAborted) {
		return j, errAborted // the operator's change stands; nothing to commit
	}
	if err == nil {
		p.configCleared(from)
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
		p.held.drop(stored.ID) // only a job still to upload keeps its descriptor
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
				p.storeAdvanced()
				p.dropBundle(stored)
			}
			return stored, err
		}
		if !p.storeTrouble(ctx, fmt.Errorf("commit job %d %s→%s: %w", next.ID, from, next.Stage, err), true) {
			return state.Job{}, err
		}
	}
}

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
		p.pause(err)
		p.log.Warn().Uint64("job", j.ID).Str("stage", string(j.Stage)).Err(err).Msg("API refused the token: pausing all workers")
		return j, errWorkerPaused
	case state.Fail:
		j = p.fail(j, now, err)
		if d.Reason != "" {
			j.FailReason = d.Reason
		}
		return j, nil
	case state.WaitConfig:
		// Not the job's fault and not its attempt: the job shows why it
		// waits (splatd jobs) and the whole pool pauses.
		// The pause holds every worker back: the job is due when it ends,
		// by itself or by ConfigChanged.
		p.pauseConfig(d, err)
		j.NextAttempt = now
		j.LastError, j.LastStatus = fmt.Sprintf("waiting: configuration error (%s): %v", d.Kind, err), 0
		return j, nil
	case state.Resign:
		// Signing again moves the job back a stage, which resets Attempts:
		// the refusals of fresh URLs in a row are counted apart, so that a
		// storage that keeps refusing them is backed off, not hammered.
		d = p.policy.Decide(ctx, err, j.Resigns+1, now)
		if d.Action == state.Fail { // a bounded patience's tries are spent
			j = p.fail(j, now, err)
			j.FailReason = d.Reason
			return j, nil
		}
		p.log.Warn().Uint64("job", j.ID).Str("path", j.Path).Int("refusals", j.Resigns+1).
			Float64("retry_in_s", d.Delay.Seconds()).Err(err).Msg("storage refused the signed URL; signing a new one")
		next, rerr := p.resign(j, now.Add(d.Delay), err.Error())
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
	p.log.Warn().Uint64("job", j.ID).Str("path", j.Path).Str("stage", string(j.Stage)).Int("attempt", j.Attempts).
		Float64("retry_in_s", d.Delay.Seconds()).Err(err).Msg("transient error; will retry")
	return j, nil
}

func (p *Pool) fail(j state.Job, now time.Time, err error) state.Job {
	from := j.Stage
	if merr := j.Move(state.Failed, now); merr != nil {
		// Every non-final stage may fail; this is a table bug.
		p.log.Error().Err(merr).Msg("cannot fail job")
		return j
	}
	j.FailReason = failReason(from, err)
	j.LastError, j.LastStatus = err.Error(), state.HTTPStatus(err)
	j.NextAttempt = now
	return j
}

func (p *Pool) logTransition(j state.Job, from state.Stage, since time.Time) {
	if j.Stage == from {
		return
	}
	ev := p.log.Info()
	if j.Stage == state.Failed || j.Stage == state.Held {
		ev = p.log.Warn()
	}
	ev = ev.Uint64("job", j.ID).Str("path", j.Path).Str("stage", string(j.Stage)).Str("from", string(from)).
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

// finished reports a job that just became final and runs its after-action stage.
func (p *Pool) finished(ctx context.Context, j state.Job) {
	result := string(j.Stage)
	if j.DuplicateOf != 0 {
		result = "duplicate"
	}
	p.o.Observer.JobFinished(result, p.o.Now().Sub(j.CreatedAt))
	p.shares.forget(j.ID)
	if j.Stage == state.Done && j.DuplicateOf == 0 && j.Protocol == state.ProtocolV1 && !fromPeer(j) {
		p.shares.published(p.o.Now())
	}
	p.finalize(ctx, j)
}

// finalize runs the after-action stage of a final job (afterstage.go),
// after removing its encoding (made again if the job is ever sent again).
func (p *Pool) finalize(ctx context.Context, j state.Job) {
	dropEncoded(j)
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
