package uploader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/uploader/sidecar"
	"github.com/splatd/splatd/watcher/trustfs"
)

// Store is what the worker pool needs from the job store. queue.Store
// implements it; the interface lives here, with its consumer, so that
// uploader does not depend on bbolt.
type Store interface {
	// Claim hands out the earliest due job nobody else holds.
	Claim(now time.Time) (job state.Job, ok bool, err error)
	// NextDue says when the earliest unclaimed job becomes runnable.
	NextDue() (at time.Time, ok bool)
	// Release gives a claimed job back.
	Release(id uint64)
	// Commit stores j moved on from stage from, atomically, and returns
	// the job as stored (which may differ: content dedupe).
	Commit(j state.Job, from state.Stage) (state.Job, error)
	// Unfinalized lists final jobs whose Finish hook has not completed.
	Unfinalized() ([]state.Job, error)
	// MarkFinalized records that the Finish hook completed.
	MarkFinalized(id uint64) error
}

// What to do with a job found in Publishing after a restart (or after a
// publish call whose answer was lost): its splat may or may not exist.
const (
	// UncertainRepublish publishes again: at worst the splat exists twice.
	UncertainRepublish = "republish"
	// UncertainHold parks the job in stage held for an operator.
	UncertainHold = "hold"
)

// PollOptions paces the polling of a published splat until processing ends.
type PollOptions struct {
	Interval    time.Duration // first pause; doubles each poll. Zero: Defaults
	MaxInterval time.Duration // cap of the pause. Zero: Defaults
	Timeout     time.Duration // since publish; then the job fails. Zero: Defaults
}

// PoolOptions configures NewPool.
type PoolOptions struct {
	Store  Store
	Client *api.Client
	// Workers is the number of jobs advanced at the same time. Zero: Defaults.
	Workers int
	// Publish holds the configured publish parameters (Title is a
	// template); sidecar.Resolve applies them to each file when it becomes
	// ready.
	Publish state.PublishParams
	// EncodeDir holds the encodings that publish.encode makes before
	// upload (encode.go); "" refuses a job that asks for one.
	EncodeDir string
	// Params, when set, answers a file's publish parameters (the daemon's
	// config.ParamsFor: the global block, the watch entry's own, the
	// folder's .splat.yaml files and the file's sidecar), as the dry run
	// and `splatd publish` ask them. nil: Publish with the file's folder
	// files and sidecar (sidecar.Resolve).
	Params ParamsFunc
	// FollowSymlinks, when set, says whether a watch root follows symbolic
	// links (follow_symlinks): its files may be links that stay inside it.
	// Elsewhere a link where a file was fails its job.
	FollowSymlinks func(root string) bool
	// SizeBounds, when set, returns a watch root's min_size and max_size
	// (0: no bound). The watcher holds a file to them; the pool holds an
	// unbundled SOG folder's bundle to them, sized before it is built (the
	// watcher sees only the folder's meta.json). nil: no bounds.
	SizeBounds func(root string) (minSize, maxSize int64)
	// OnUncertain is UncertainRepublish (default) or UncertainHold.
	OnUncertain string
	Poll        PollOptions
	// Patience overrides the retry rule's patience profiles
	// (state.DefaultPatience): a job's steps, v1 parts, after-actions, the
	// store and the token prober. Nil: the defaults. Tests use short ones.
	Patience map[state.Profile]state.Patience
	// ProbeAPI, when set, makes the pool probe the token as it starts (a
	// refused token pauses it at once, idle or not) and, every ProbeAPI,
	// while the API's last calls got no answer (api.Client.Unreachable),
	// so that an idle daemon sees it answer again. Zero: no probes but
	// the token pause's.
	ProbeAPI time.Duration
	// TokenRecheck is how often a paused pool re-reads the token source
	// (api.Token.Reload). Zero: Defaults.
	TokenRecheck time.Duration
	// Grace is how long steps in flight may run once Run's context ends
	// (see Run). Zero: Defaults.
	Grace time.Duration
	// Settle is how long a file that changed since it was last seen must
	// stay unchanged before it is hashed (and the first pause for one that
	// is still incomplete). Zero: Defaults.
	Settle time.Duration
	// BundleDir is where an unbundled SOG folder's bundle is built (the
	// daemon: state_dir/sog-bundles; never a watch folder). Empty: a
	// folder under the system's temporary directory.
	BundleDir string
	// URLMaxAge is the age after which a stored signed URL is not used for
	// a PUT but signed again. Zero: Defaults.
	URLMaxAge time.Duration
	// Protocol is the API new jobs are published through: ProtocolLegacy
	// (default) or ProtocolV1. A job that has started keeps its own.
	Protocol string
	// ParallelParts is the number of v1 part PUTs in flight per job,
	// 1..16. Zero: Defaults.
	ParallelParts int
	// PeerWait is how long a v1 job whose session another daemon created
	// watches that session's parts without progress before it sends the
	// missing ones itself. Zero: Defaults.
	PeerWait time.Duration
	// PeerReceipt reads the receipt another daemon of a fleet wrote for
	// j's file: its outcome when the receipt proves j's content published
	// through this protocol and service, ErrNoPeerReceipt while there is
	// none, another error when none can come. Nil: no receipts in this
	// fleet, and a peer's completed session is learned by replaying
	// complete. A job waits PeerWait at most for a receipt (peer.go).
	PeerReceipt func(j state.Job) (PeerOutcome, error)
	// Fleet names the fleet's live members, whose shares of a shared
	// folder this daemon leaves to them (share.go). Nil: no shares.
	Fleet Fleet
	// IncompleteTimeout fails a file still incomplete this long after it
	// last changed (incomplete_timeout). Zero: Defaults; negative: never.
	IncompleteTimeout time.Duration
	// RefusedGrace is how long a host may refuse connections before that
	// pauses the pool as a configuration error. Zero: 2 min.
	RefusedGrace time.Duration
	// MaxServerWait caps a delay a server asks for (Retry-After, a 429's
	// reset). Zero: Defaults.
	MaxServerWait time.Duration
	// OnStoreRecovered, when set, is called when the job store works again
	// after failing (the daemon rescans the watch folders at once). It must
	// not block.
	OnStoreRecovered func()
	// Finish is called once for every job that reaches done, failed or
	// held (also after a crash, at the next Run, if it had not completed).
	// An error is logged and Finish runs again at the next start.
	Finish func(ctx context.Context, j state.Job) error
	// OnTransition, when set, sees every committed stage change (after its
	// log line). `splatd demo` prints the files' journeys from it. It must
	// not block.
	OnTransition func(j state.Job, from state.Stage)
	// Observer receives JobFinished (and the client's own hooks).
	Observer Observer
	Logger   zerolog.Logger
	// FS is the trust boundary every access under a watch folder goes
	// through. Nil: one that knows no watch folders.
	FS *trustfs.FS
	// Now and Rand are the clock and the jitter source (tests inject them).
	Now  func() time.Time
	Rand func() float64

	// workerHook, set only by tests, is called at named points between a
	// side effect and a commit; a non-nil error stops the pool at once as if
	// the process had died there.
	workerHook func(point string, j state.Job) error
}

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
	publish atomic.Pointer[publishDefaults] // o.Publish and o.OnUncertain, replaced by SetPublish
	held    heldFiles                       // each job's descriptor from its hash to its upload (jobfile.go)
	shares  *shares                         // the fleet's progress (share.go)
}

// ParamsFunc answers the publish parameters of the file at path (under
// the watch root root), last changed at mod.
type ParamsFunc func(path, root string, mod time.Time) (state.PublishParams, error)

// publishDefaults are the publish settings a reload may change.
type publishDefaults struct {
	params      state.PublishParams
	paramsFor   ParamsFunc // nil: params and the file's own folder files and sidecar
	onUncertain string
}

// resolve is a file's publish parameters.
func (d *publishDefaults) resolve(fsys *trustfs.FS, path, root string, mod time.Time) (state.PublishParams, error) {
	if d.paramsFor != nil {
		return d.paramsFor(path, root, mod)
	}
	return sidecar.Resolve(fsys, d.params, path, root, mod)
}

// NewPool checks o and builds a pool; Run starts it.
func NewPool(o PoolOptions) (*Pool, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	p := &Pool{
		o:           o,
		policy:      policyOf(o),
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
	p.publish.Store(&publishDefaults{params: o.Publish, paramsFor: o.Params, onUncertain: o.OnUncertain})
	return p, nil
}

// fill checks o and sets every zero option to its default.
func (o *PoolOptions) fill() error {
	if o.Store == nil || o.Client == nil {
		return errors.New("uploader: pool needs a Store and a Client")
	}
	switch o.OnUncertain {
	case "":
		o.OnUncertain = UncertainRepublish
	case UncertainRepublish, UncertainHold:
	default:
		return fmt.Errorf("uploader: publish.on_uncertain must be %q or %q, not %q", UncertainRepublish, UncertainHold, o.OnUncertain)
	}
	if err := o.fillV1(); err != nil {
		return err
	}
	o.fillDefaults()
	return nil
}

// fillDefaults sets the zero options that need no check to their defaults
// (Defaults). Rand comes first: the backoffs share it.
func (o *PoolOptions) fillDefaults() {
	def := Defaults()
	if o.BundleDir == "" {
		o.BundleDir = filepath.Join(os.TempDir(), "splatd-sog-bundles")
	}
	if o.Workers <= 0 {
		o.Workers = def.Workers
	}
	if o.Poll.Interval <= 0 {
		o.Poll.Interval = def.Poll.Interval
	}
	if o.Poll.MaxInterval < o.Poll.Interval {
		o.Poll.MaxInterval = max(def.Poll.MaxInterval, o.Poll.Interval)
	}
	if o.Poll.Timeout <= 0 {
		o.Poll.Timeout = def.Poll.Timeout
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Settle <= 0 {
		o.Settle = def.Settle
	}
	if o.TokenRecheck <= 0 {
		o.TokenRecheck = def.TokenRecheck
	}
	if o.Grace <= 0 {
		o.Grace = def.Grace
	}
	if o.URLMaxAge <= 0 {
		o.URLMaxAge = def.URLMaxAge
	}
	if o.IncompleteTimeout == 0 {
		o.IncompleteTimeout = def.IncompleteTimeout
	}
	if o.MaxServerWait <= 0 {
		o.MaxServerWait = def.MaxServerWait
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// SetPublish replaces the configured publish parameters and the uncertain
// outcome rule, for a config reload. Jobs that become ready from now on use
// them; a job already ready keeps the parameters it resolved then.
func (p *Pool) SetPublish(params state.PublishParams, paramsFor ParamsFunc, onUncertain string) error {
	switch onUncertain {
	case "":
		onUncertain = UncertainRepublish
	case UncertainRepublish, UncertainHold:
	default:
		return fmt.Errorf("uploader: publish.on_uncertain must be %q or %q, not %q", UncertainRepublish, UncertainHold, onUncertain)
	}
	p.publish.Store(&publishDefaults{params: params, paramsFor: paramsFor, onUncertain: onUncertain})
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
		grace := time.NewTimer(p.o.Grace)
		defer grace.Stop()
		select {
		case <-workersDone:
		case <-grace.C:
			p.log.Warn().Float64("grace_s", p.o.Grace.Seconds()).Msg("abandoning in-flight calls; they resume from the last committed stage at the next start")
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
	if p.o.OnTransition != nil {
		p.o.OnTransition(j, from)
	}
}

// finished reports a job that just became final and runs the Finish hook.
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

// finishPending runs the Finish hook of jobs that became final before a
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
