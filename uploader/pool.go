package uploader

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/content"
	"github.com/splatd/splatd/uploader/fleet"
	"github.com/splatd/splatd/uploader/health"
	"github.com/splatd/splatd/uploader/meter"
	"github.com/splatd/splatd/uploader/step"
)

// Pool runs the workers that advance jobs. Each worker claims a job and
// moves it one stage per step, committing each stage before the side effect
// of the next, so a crash at any point resumes from the last commit.
type Pool struct {
	o      PoolOptions
	policy state.Policy // the one retry rule, with o.Patience and o.Settle
	log    zerolog.Logger
	wake   chan struct{}

	meters *meter.Board // running uploads and the checks' hashes, bundles, encodings

	runMu   sync.Mutex
	running map[uint64]context.CancelCauseFunc // the jobs workers run now, by id (Abort)

	draining atomic.Bool   // Run's ctx ended: finish the current step, start no other
	drainCh  chan struct{} // closed when draining starts

	token *health.Token  // the 401 pause and its prober
	cfg   *health.Config // a configuration error pauses the pool
	store *health.Store  // the job store while it fails

	after   afterState                      // failed after-actions and their retries (afterstage.go)
	publish atomic.Pointer[publishDefaults] // o.Files and o.OnUncertain, replaced by SetPublish

	env        *step.Env   // what the protocols' steps are given (protocol.go)
	fleet      *fleet.View // o.Peers: receipts and shares
	legacy, v1 Protocol
	content    *content.Source // the jobs' content: the queued check, descriptors, encodings, bundles
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
		o:       o,
		policy:  policyOf(o.Timing),
		after:   newAfterState(),
		log:     o.Logger.With().Str("component", "worker").Logger(),
		wake:    make(chan struct{}, o.Workers),
		meters:  meter.New(o.Now),
		running: make(map[uint64]context.CancelCauseFunc),
		drainCh: make(chan struct{}),
	}
	he := health.Env{Log: p.log, Now: o.Now, Policy: p.policy, Wake: p.Wake}
	p.token = health.NewToken(he, o.Client, o.Protocol == ProtocolV1, o.Timing.ProbeAPI, o.Timing.TokenRecheck)
	p.cfg, p.store = health.NewConfig(he, o.Observer.ConfigError), health.NewStore(he, o.Observer.StoreRecovered)
	p.publish.Store(&publishDefaults{files: o.Files, onUncertain: o.OnUncertain})
	p.newProtocols()
	p.content = newContent(p)
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
// and the token prober until ctx ends; it then drains (steps in flight
// finish and commit for up to Grace, then are cancelled: docs/architecture.md,
// "The uploader core"). It returns an error only when the store fails.
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
	go func() { _ = p.token.Run(helpers); helpersDone <- struct{}{} }()
	go func() { _ = p.afterLoop(helpers); helpersDone <- struct{}{} }()

	g, gctx := errgroup.WithContext(work)
	for i := range p.o.Workers {
		g.Go(func() error { return p.worker(gctx, i) })
	}
	err := g.Wait()
	p.content.Close()
	close(workersDone)
	stopHelpers()
	<-helpersDone
	<-helpersDone
	if errors.Is(err, context.Canceled) || errors.Is(err, step.ErrDrained) {
		return nil
	}
	return err
}

// untilDrain returns a context that also ends when the pool starts draining.
func (p *Pool) untilDrain(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	if p.draining.Load() { // ended already, not some time after the step began
		cancel(step.ErrDrained)
		return ctx, func() { cancel(nil) }
	}
	go func() {
		select {
		case <-p.drainCh:
			cancel(step.ErrDrained)
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
func (p *Pool) Paused() error { return p.token.Err() }

// ConfigChanged says that what a pause may wait on changed (a new
// api.ca_file, a new token): a configuration pause ends now, the token
// prober probes now, and the waiting jobs are tried again at once.
func (p *Pool) ConfigChanged() { p.cfg.Changed(); p.token.ProbeNow() }

// ConfigError returns the configuration error that pauses the workers, its
// kind (state.ConfigTLS, ConfigDNS, ConfigRefused) and since when; err is
// nil when there is none.
func (p *Pool) ConfigError() (err error, kind string, since time.Time) { return p.cfg.Err() }

// StoreError returns the last store failure while the store keeps failing
// (for /readyz), nil once a job was advanced again.
func (p *Pool) StoreError() error { return p.store.Err() }
