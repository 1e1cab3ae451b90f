// Package daemon assembles `splatd run` from the components (watcher, job
// store, pool, pacer, notifier, listeners) and runs each as a block of Run,
// stopped in the numbered order docs/architecture.md gives. It also holds
// what only a running daemon answers: the admin socket, reloads, the status
// page's source, adoption of receipts and the dry run's prediction.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/notify"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/watcher"
	"github.com/splatd/splatd/watcher/trustfs"
)

// pacerStateFile, in state_dir, holds the pacer's last known windows.
const pacerStateFile = "pacer.json"

// Options are what Open needs beside the config.
type Options struct {
	// ConfigPath is the file the config came from, read again by a reload.
	ConfigPath string
	// Getenv reads the environment: the token's variable and systemd's
	// NOTIFY_SOCKET and WATCHDOG_USEC.
	Getenv func(string) string
	Logger zerolog.Logger
	// LogLevel, when set, is the writer under Logger: a reload changes its
	// level (nil when the caller made its own logger, as the demo does).
	LogLevel interface{ SetLevel(zerolog.Level) }
	// Version is the build's version: the start line, the build metric,
	// the status page and the API client's User-Agent.
	Version string
	// HUP delivers SIGHUP (nil: no signal reloads, as in the demo).
	HUP <-chan os.Signal
	// OnTransition, when set (by the demo), sees every stage change.
	OnTransition func(j state.Job, from state.Stage)
}

// Daemon is `splatd run`: the watcher feeds the queue, the pool works it.
type Daemon struct {
	cfg *config.Config
	o   Options
	log zerolog.Logger

	store   *queue.Store
	client  *api.Client
	pacer   *pace.Pacer
	pool    *uploader.Pool
	watch   *watcher.Watcher
	reg     *prometheus.Registry
	m       *metrics.Metrics
	metrics *metrics.Server // nil when metrics.listen is ""
	admin   *adminServer
	systemd *sdNotifier       // sd_notify: READY, STATUS, WATCHDOG, STOPPING
	events  *notify.Notifier  // notify.webhook and after.exec
	intake  *intake           // receipts adopted at intake, store recovery (intake.go)
	damaged chan error        // the store met damage while running (store.go)
	history *metrics.EventLog // the status page's event history
	fleet   *fleet            // the fleet's members on the watch folders; nil outside v1 with receipts (fleet.go)
	fs      *trustfs.FS       // the trust boundary: the watcher names the watch folders to it

	// actions are the after-actions and receipts; a reload replaces them.
	actions atomic.Pointer[after.Runners]
	// live is the config in force (cfg as started, with what reloads
	// applied), and reloadMu makes reloads (SIGHUP, splatd reload) one at
	// a time.
	live     atomic.Pointer[config.Config]
	reloadMu sync.Mutex
	ca       caState // api.ca_file as the client took it; under reloadMu (cafile.go)
	apiGrace time.Duration
}

// Open builds every component; nothing runs until run. The state
// directory is opened first so that a second splatd fails at once; what
// fails later closes what was opened before it.
func Open(cfg *config.Config, o Options) (d *Daemon, err error) {
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	log, getenv := o.Logger, o.Getenv
	d = &Daemon{cfg: cfg, o: o, log: log, systemd: newSDNotifier(getenv), intake: newIntake(), damaged: make(chan error, 1), history: &metrics.EventLog{}, apiGrace: apiGrace, fs: new(trustfs.FS)}
	d.live.Store(cfg)
	d.reg, d.m = metrics.NewRegistry(d.o.Version, api.Routes)
	token, err := api.LoadToken(cfg.API.TokenFile, getenv)
	if err != nil {
		return nil, err
	}
	d.store, err = d.openStore()
	if err != nil {
		return nil, err
	}
	// The deferred close holds the daemon itself, not the named result:
	// every `return nil, err` below sets d to nil before it runs.
	opened := d
	defer func() {
		if err != nil {
			opened.closeAll()
		}
	}()
	d.pacer = d.newPacer()
	if d.client, err = NewClient(cfg, o.Version, token, d.pacer, d.m, log); err != nil { // the client names its own component
		return nil, err
	}
	d.ca = readCA(cfg)
	if d.events, err = d.newEvents(token.Value()); err != nil {
		return nil, err
	}
	if cfg.API.Protocol == uploader.ProtocolV1 && cfg.After.Receipt {
		d.fleet = newFleet(d.fs, cfg.FleetIdentity(), func() []string { return d.config().WatchPaths() }, time.Now,
			log.With().Str("component", "fleet").Logger())
	}
	if d.pool, err = d.newPool(); err != nil {
		return nil, err
	}
	if d.fleet != nil {
		d.fleet.busy = d.fleetBusy
	}
	d.m.SetUploadSource(metrics.UploadSource{Limit: d.client.Limiter().Rate, InFlight: d.uploadsInFlight})
	if d.watch, err = d.newWatcher(); err != nil {
		return nil, err
	}
	d.m.SetReadySource(d.ready)
	if d.metrics, err = d.openMetrics(); err != nil {
		return nil, err
	}
	if d.admin, err = newAdminServer(filepath.Join(cfg.StateDir, SocketName), d, log.With().Str("component", "admin").Logger()); err != nil {
		return nil, err
	}
	return d, nil
}

// newPacer builds the pacer. It keeps each limit class's window in the
// state directory, so a restarted daemon waits for a spent window's reset
// instead of drawing a 429 (the lock on the state file makes it this
// daemon's).
func (d *Daemon) newPacer() *pace.Pacer {
	return pace.New(pace.Options{
		StateFile: filepath.Join(d.cfg.StateDir, pacerStateFile),
		MaxWait:   d.cfg.API.MaxServerWait.D(), // a Reset or Retry-After beyond it is capped, as the retry rule caps it
		Waited:    d.m.RateLimitWait,
		Logger:    d.log.With().Str("component", "pacer").Logger(),
		Clients:   d.fleetClients,
	})
}

// openMetrics builds and binds the metrics and status listener, or
// returns nil when metrics.listen is "".
func (d *Daemon) openMetrics() (*metrics.Server, error) {
	cfg, log := d.cfg, d.log
	if cfg.Metrics.Listen == "" {
		return nil, nil
	}
	o := metrics.ServerOptions{
		Listen:   cfg.Metrics.Listen,
		Registry: d.reg,
		Ready:    d.ready,
		Degraded: d.degraded,
		Status:   statusView{d},
		Events:   d.history,
		Logger:   log.With().Str("component", "metrics").Logger(),
		// The page's actions: the admin socket's code path (act).
		Act:           d.pageAct,
		ActionKeyFile: filepath.Join(cfg.StateDir, metrics.ActionKeyName),
		RemoteActions: cfg.Status.RemoteActions,
	}
	var err error
	if o.ActionKey, err = metrics.ActionKey(o.ActionKeyFile); err != nil {
		return nil, err
	}
	if cfg.Status.TokenFile != "" {
		o.StatusToken = metrics.TokenFile(cfg.Status.TokenFile)
	}
	srv := metrics.NewServer(o)
	if err := srv.Listen(); err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("metrics.listen: %w (another program holds %s; set metrics.listen to a free address, or \"\" to turn the listener off)", err, cfg.Metrics.Listen)
		}
		return nil, fmt.Errorf("metrics.listen: %w", err)
	}
	return srv, nil
}

// newWatcher builds the watcher over the configured roots.
func (d *Daemon) newWatcher() (*watcher.Watcher, error) {
	cfg := d.cfg
	roots := cfg.Roots()
	rescan := cfg.RescanInterval.D()
	if rescan == 0 {
		rescan = -1 // the watcher's "off"
	}
	return watcher.New(watcher.Options{
		Roots:          roots,
		Settle:         max(cfg.Settle.D(), time.Millisecond),
		RescanInterval: rescan,
		Logger:         d.log.With().Str("component", "watcher").Logger(),
		Known:          d.store.Known,
		KnownBatch:     d.knownBatch,
		Observer:       d.m,
		OnSettings:     d.settingsChanged,
		FS:             d.fs,
	})
}

// knownBatch is the store's KnownBatch for the watcher's scans.
func (d *Daemon) knownBatch(files []watcher.Candidate) []bool {
	qs := make([]queue.Candidate, len(files))
	for i, c := range files {
		qs[i] = candidate(c)
	}
	return d.store.KnownBatch(qs)
}

// closeAll releases what Open opened: the listeners (when run never
// started them) and the state.
func (d *Daemon) closeAll() {
	if d.metrics != nil {
		d.metrics.Close()
	}
	if d.admin != nil {
		d.admin.close()
	}
	d.Close()
}

// Close closes the state. Run has returned (its notifier drained), or
// never ran.
func (d *Daemon) Close() {
	if err := d.store.Close(); err != nil {
		d.log.Error().Err(err).Msg("closing the state")
	}
}

// apiProbe is how often an idle daemon probes an API that did not answer.
const apiProbe = 15 * time.Second

// Run starts the components and stops them in order when ctx ends or one
// of them fails. Each component runs until its own context ends and owns
// its own drain; this function only decides the order.
//
// Start order: listeners (operators can look from the first moment),
// workers (jobs left from the last run resume at once), intake (startup
// scan, then events), then READY=1. Shutdown runs the other way round.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)

	// Listeners: /metrics, /readyz and the admin socket; up first and down
	// last, so the drain can be watched.
	listeners := d.startListeners(ctx, fail)
	defer listeners.stop()

	// Events: webhooks and after.exec of the jobs that finish; stopped
	// after the workers, whose after-actions queue them, and then drained
	// for eventsGrace (the notifier's own Run).
	notifier := newStage(context.WithoutCancel(ctx), nil)
	defer notifier.stop()
	notifier.start("notifier", d.events.Run)

	// Workers: the pool drains itself when work ends (no new claims, calls
	// in flight get the pool's grace, uploader.Defaults). The stats loop feeds the gauges, STATUS=
	// and the watchdog; maintenance keeps the state file bounded.
	workers := d.startWorkers(ctx, fail)
	defer workers.stop()

	// Intake: the watcher reports finished files, the enqueuer records them.
	intake := d.startIntake(ctx, fail)
	defer intake.stop()

	d.announceStarted()

	<-ctx.Done()
	runErr := context.Cause(ctx)
	if errors.Is(runErr, context.Canceled) {
		runErr = nil // SIGTERM or SIGINT: a clean stop
		d.log.Info().Msg("stopping: no new files are taken; in-flight calls may finish")
	}
	_ = d.systemd.send("STOPPING=1")
	// 1. Intake: no new files.
	_ = intake.halt()
	// 2. Workers: finish or abandon the calls in flight, then the loops.
	_ = workers.halt()
	// 3. Pacer: its windows written once more, after the last request.
	if err := d.pacer.Flush(); err != nil {
		d.log.Warn().Err(err).Msg("saving the rate-limit windows")
	}
	// 4. Notifier: the last jobs' notifications go out within eventsGrace
	// (what is left is logged by the notifier).
	_ = notifier.halt()
	// 5. Listeners.
	_ = listeners.halt()
	if runErr == nil {
		d.log.Info().Msg("stopped cleanly; every job resumes at the next start")
	}
	return runErr
}

// startListeners starts /metrics, /readyz, the admin socket, the reload
// signal and the ca_file watch.
func (d *Daemon) startListeners(ctx context.Context, fail context.CancelCauseFunc) *stage {
	listeners := newStage(context.WithoutCancel(ctx), fail)
	if d.metrics != nil {
		listeners.start("metrics", d.metrics.Run)
	}
	listeners.start("admin socket", d.admin.run)
	listeners.start("reload", func(ctx context.Context) error { d.reloadOnHUP(ctx); return nil })
	listeners.start("ca_file", d.watchCAFile)
	return listeners
}

// startWorkers starts the fleet's announcements, the pool, the stats and
// maintenance loops and, once, the leftovers of moves a power cut undid.
func (d *Daemon) startWorkers(ctx context.Context, fail context.CancelCauseFunc) *stage {
	workers := newStage(context.WithoutCancel(ctx), fail)
	logResume(d.store, d.log)
	if d.fleet != nil {
		d.fleet.announce() // before the first claim: the peers see this daemon's share from its start
		workers.start("fleet", func(ctx context.Context) error {
			return d.fleet.run(ctx, func() bool { return d.pool.Paused() != nil })
		})
	}
	workers.start("workers", d.pool.Run)
	workers.start("stats", func(ctx context.Context) error { d.statsLoop(ctx); return nil })
	workers.start("maintenance", func(ctx context.Context) error { d.maintain(ctx); return nil })
	// Once at start: what a power cut left of a move recorded done.
	workers.start("leftovers", func(ctx context.Context) error {
		d.actions.Load().FinishLeftovers(ctx, d.store.Get)
		return nil
	})
	return workers
}

// startIntake starts the watcher, the enqueuer and the store probe; a
// damaged store found by any of them ends Run.
func (d *Daemon) startIntake(ctx context.Context, fail context.CancelCauseFunc) *stage {
	intake := newStage(ctx, fail)
	cands := make(chan watcher.Candidate, 256)
	intake.start("watcher", func(ctx context.Context) error { return d.watch.Run(ctx, cands) })
	intake.start("enqueue", func(ctx context.Context) error { d.enqueue(ctx, cands); return nil })
	intake.start("store probe", func(ctx context.Context) error { d.probeStore(ctx); return nil })
	go func() {
		select {
		case err := <-d.damaged:
			fail(err)
		case <-ctx.Done():
		}
	}()
	return intake
}

// stage is one step of the shutdown order: components that run under one
// context and are stopped together.
type stage struct {
	ctx  context.Context
	stop context.CancelFunc
	fail context.CancelCauseFunc // nil: an error is the stage's, returned by halt
	g    errgroup.Group
}

func newStage(parent context.Context, fail context.CancelCauseFunc) *stage {
	s := &stage{fail: fail}
	s.ctx, s.stop = context.WithCancel(parent)
	return s
}

// start runs one component until the stage stops. With fail set, its error
// stops the daemon, named by the component.
func (s *stage) start(name string, run func(context.Context) error) {
	s.g.Go(func() error {
		err := run(s.ctx)
		if err != nil {
			err = fmt.Errorf("%s: %w", name, err)
			if s.fail != nil {
				s.fail(err)
			}
		}
		return err
	})
}

// halt stops the stage's components and waits for them to return.
func (s *stage) halt() error {
	s.stop()
	return s.g.Wait()
}

// announceStarted logs the start line and tells systemd the daemon is ready.
func (d *Daemon) announceStarted() {
	d.log.Info().Str("version", d.o.Version).Strs("watch", d.cfg.WatchPaths()).Str("protocol", d.cfg.API.Protocol).
		Str("state_dir", d.cfg.StateDir).Int("workers", d.cfg.Workers).Str("api", d.cfg.API.BaseURL).
		Str("token_from", d.client.Token().Origin()).Msg("splatd started")
	for _, n := range d.cfg.ProtocolNotes() {
		d.log.Warn().Msg(n)
	}
	if err := d.systemd.send("READY=1"); err != nil {
		d.log.Warn().Err(err).Msg("sd_notify READY=1")
	}
}

// Store is the job store, for the demo's journey.
func (d *Daemon) Store() *queue.Store { return d.store }

// Client is the API client, for the demo's checkpoint listing.
func (d *Daemon) Client() *api.Client { return d.client }

// MetricsAddr is the metrics listener's address ("" when it is off).
func (d *Daemon) MetricsAddr() string {
	if d.metrics == nil {
		return ""
	}
	return d.metrics.Addr()
}
