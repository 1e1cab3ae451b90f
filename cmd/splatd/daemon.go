package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/watcher"
)

// shutdownGrace is how long in-flight API calls may run after SIGTERM.
// Every stage is committed before its side effect, so abandoning a call is
// safe; the grace exists so that a publish call in flight can return its
// answer instead of leaving an uncertain outcome for the next start.
const shutdownGrace = 20 * time.Second

// daemon is `splatd run`: the watcher feeds the queue, the pool works it.
type daemon struct {
	cfg    *Config
	log    zerolog.Logger
	tokMu  sync.Mutex  // guards token and source: reloadToken writes them while /readyz reads
	source tokenSource // where the token in use was read
	token  string      // the token in use, to notice a changed source; never logged

	store   *queue.Store
	drain   *drainStore
	client  *api.Client
	pool    *uploader.Pool
	watch   *watcher.Watcher
	reg     *prometheus.Registry
	m       *metrics.Metrics
	metrics *metrics.Server
	admin   *adminServer
	notify  *notifier
	getenv  func(string) string

	// onTransition, when set before run (by the demo), sees every stage change.
	onTransition func(j state.Job, from state.Stage)
}

func cmdRun(ctx context.Context, c *cli, args []string) int {
	fs := newFlags(c, "run")
	cfgPath := configFlag(c, fs)
	pos, code, ok := parseOrExit(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(c, fs, "takes no arguments (did you mean -config %s?)", pos[0])
	}
	cfg, err := loadConfig(*cfgPath, true)
	if err != nil {
		fmt.Fprintln(c.stderr, err)
		return exitUsage
	}
	log := newLogger(cfg.Log, c.stderr)
	d, err := openDaemon(cfg, c.getenv, log)
	if err != nil {
		log.Error().Err(err).Msg("cannot start")
		fmt.Fprintf(c.stderr, "splatd: %v\n", err)
		return exitFailure
	}
	defer d.close()
	if err := d.run(ctx); err != nil {
		log.Error().Err(err).Msg("stopped with an error")
		return exitFailure
	}
	return exitOK
}

// newLogger writes JSON (journald, collectors) or console lines to w;
// "auto" is console on a terminal and JSON anywhere else (systemd, pipes,
// containers).
func newLogger(lc LogConfig, w io.Writer) zerolog.Logger {
	level, err := zerolog.ParseLevel(lc.Level)
	if err != nil {
		level = zerolog.InfoLevel
	}
	if lc.Format == "console" || (lc.Format == "auto" && isTerminal(w)) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339, NoColor: !isTerminal(w)}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// openDaemon builds every component; nothing runs until run. The state
// directory is opened first so that a second splatd fails at once.
func openDaemon(cfg *Config, getenv func(string) string, log zerolog.Logger) (*daemon, error) {
	d := &daemon{cfg: cfg, log: log, notify: newNotifier(getenv), getenv: getenv}
	d.reg, d.m = metrics.NewRegistry(buildVersion(), api.Routes)

	token, source, err := loadToken(cfg, getenv)
	if err != nil {
		return nil, err
	}
	client, err := newClient(cfg, token, d.m, log) // the client names its own component
	if err != nil {
		return nil, err
	}
	d.client, d.token, d.source = client, token, source // before any goroutine starts

	store, err := queue.Open(cfg.StateDir, queue.Options{Logger: log.With().Str("component", "queue").Logger()})
	if err != nil {
		if errors.Is(err, queue.ErrLocked) {
			return nil, fmt.Errorf("another splatd is using %s (state_dir); stop it first or give this one its own state_dir", cfg.StateDir)
		}
		return nil, err
	}
	d.store = store
	d.drain = &drainStore{Store: store}

	actions := after.New(after.Options{
		OnSuccess:  cfg.After.OnSuccess,
		SuccessDir: cfg.After.SuccessDir,
		OnFailure:  cfg.After.OnFailure,
		FailureDir: cfg.After.FailureDir,
		Receipt:    cfg.After.Receipt,
		Lookup:     store.Get,
		Logger:     log,
	})
	pool, err := uploader.NewPool(uploader.PoolOptions{
		Store:       d.drain,
		Client:      client,
		Workers:     cfg.Workers,
		Publish:     cfg.Publish.Params(),
		OnUncertain: cfg.Publish.OnUncertain,
		Poll: uploader.PollOptions{
			Interval:    cfg.Poll.Interval.D(),
			MaxInterval: cfg.Poll.MaxInterval.D(),
			Timeout:     cfg.Poll.Timeout.D(),
		},
		Settle: max(cfg.Settle.D(), 100*time.Millisecond),
		Finish: func(ctx context.Context, j state.Job) error {
			_, err := actions.Finish(ctx, j)
			return err
		},
		OnTransition: func(j state.Job, from state.Stage) {
			if d.onTransition != nil {
				d.onTransition(j, from)
			}
		},
		Observer: d.m,
		Logger:   log,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	d.pool = pool

	roots := make([]watcher.Root, len(cfg.Watch))
	for i, w := range cfg.Watch {
		roots[i] = watcher.Root{
			Path: w.Path, Recursive: *w.Recursive, Include: w.Include, Exclude: w.Exclude,
			Mode: w.Mode, PollInterval: w.PollInterval.D(), FollowSymlinks: w.FollowSymlinks,
		}
	}
	rescan := cfg.RescanInterval.D()
	if rescan == 0 {
		rescan = -1 // the watcher's "off"
	}
	d.watch, err = watcher.New(watcher.Options{
		Roots:          roots,
		Settle:         max(cfg.Settle.D(), time.Millisecond),
		RescanInterval: rescan,
		Logger:         log.With().Str("component", "watcher").Logger(),
		Known:          store.Known,
		Observer:       d.m,
	})
	if err != nil {
		store.Close()
		return nil, err
	}

	if cfg.Metrics.Listen != "" {
		d.metrics = metrics.NewServer(metrics.ServerOptions{
			Listen:   cfg.Metrics.Listen,
			Registry: d.reg,
			Ready:    d.ready,
			Logger:   log.With().Str("component", "metrics").Logger(),
		})
		if err := d.metrics.Listen(); err != nil {
			store.Close()
			return nil, fmt.Errorf("metrics.listen: %w", err)
		}
	}
	d.admin, err = newAdminServer(filepath.Join(cfg.StateDir, adminSocketName), d, log.With().Str("component", "admin").Logger())
	if err != nil {
		store.Close()
		return nil, err
	}
	return d, nil
}

func (d *daemon) close() {
	if err := d.store.Close(); err != nil {
		d.log.Error().Err(err).Msg("closing the state")
	}
}

// ready is /readyz: the state is open, every watch root is scanned and
// watched (or polled), and the API accepts the token.
func (d *daemon) ready() error {
	var why []string
	if !d.watch.Healthy() {
		why = append(why, "watch folders not (yet) scanned and watched")
	}
	if err := d.pool.StoreError(); err != nil {
		why = append(why, fmt.Sprintf("the job store fails: %v", err))
	}
	if err := d.pool.Paused(); err != nil {
		why = append(why, fmt.Sprintf("the API refuses the token read from %s: %v", d.tokenSource(), err))
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}

// run starts the components and stops them in order when ctx ends.
//
// Start order: metrics + admin (operators can look from the first moment),
// workers (jobs left from the last run resume at once), watcher (startup
// scan, then events), then READY=1.
//
// Shutdown order, on SIGTERM/SIGINT:
//  1. STOPPING=1; the watcher and the enqueuer stop: no new intake.
//  2. Workers claim no new job; those in flight get shutdownGrace to finish
//     their current call, then their context is cancelled. Every stage was
//     committed before its side effect, so an abandoned call is redone from
//     the last commit at the next start.
//  3. The admin socket and the metrics listener close last, so the drain
//     can be watched; the store is closed by the caller.
func (d *daemon) run(ctx context.Context) error {
	intakeCtx, stopIntake := context.WithCancel(ctx)
	defer stopIntake()
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	serveCtx, stopServe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServe()

	var g errgroup.Group
	if d.metrics != nil {
		g.Go(func() error { return d.metrics.Run(serveCtx) })
	}
	g.Go(func() error { return d.admin.run(serveCtx) })

	poolDone := make(chan error, 1)
	go func() { poolDone <- d.pool.Run(workCtx) }()

	cands := make(chan watcher.Candidate, 256)
	watchDone := make(chan error, 1)
	go func() { watchDone <- d.watch.Run(intakeCtx, cands) }()
	enqDone := make(chan struct{})
	go func() { defer close(enqDone); d.enqueue(intakeCtx, cands) }()

	statsDone := make(chan struct{})
	go func() { defer close(statsDone); d.statsLoop(workCtx) }()
	maintDone := make(chan struct{})
	go func() { defer close(maintDone); d.maintain(workCtx) }()

	d.log.Info().Str("version", buildVersion()).Int("workers", d.cfg.Workers).Str("state_dir", d.cfg.StateDir).
		Str("api", d.cfg.API.BaseURL).Str("token_from", string(d.tokenSource())).Msg("splatd started")
	if err := d.notify.send("READY=1"); err != nil {
		d.log.Warn().Err(err).Msg("sd_notify READY=1")
	}

	var runErr error
	select {
	case <-ctx.Done():
		d.log.Info().Msg("stopping: no new files are taken; in-flight calls may finish")
	case err := <-watchDone:
		runErr = fmt.Errorf("watcher: %w", err)
		watchDone <- nil
	case err := <-poolDone:
		runErr = fmt.Errorf("workers: %w", err)
		poolDone <- err
	}
	_ = d.notify.send("STOPPING=1")

	// 1. intake
	stopIntake()
	<-watchDone
	<-enqDone

	// 2. workers
	d.drain.start()
	d.pool.Drain()
	grace := time.NewTimer(shutdownGrace)
	select {
	case <-d.drain.idle():
	case <-grace.C:
		d.log.Warn().Dur("grace", shutdownGrace).Msg("abandoning in-flight calls; they resume from the last committed stage at the next start")
	case err := <-poolDone:
		poolDone <- err
	}
	grace.Stop()
	stopWork()
	if err := <-poolDone; err != nil && runErr == nil {
		runErr = fmt.Errorf("workers: %w", err)
	}
	<-statsDone
	<-maintDone

	// 3. listeners
	stopServe()
	if err := g.Wait(); err != nil && runErr == nil {
		runErr = err
	}
	if runErr == nil {
		d.log.Info().Msg("stopped cleanly; every job resumes at the next start")
	}
	return runErr
}

// enqueue records each finished file the watcher reports. Enqueue is
// idempotent, so a file reported twice (rescan, restart) is one job. What
// arrives together (a startup scan, a burst) is committed in one
// transaction: one fsync per batch instead of one per file.
func (d *daemon) enqueue(ctx context.Context, cands <-chan watcher.Candidate) {
	const maxBatch = 512
	batch := make([]queue.Candidate, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case c := <-cands:
			batch = append(batch, queue.Candidate{Path: c.Path, Root: c.Root, Size: c.Size, ModTime: c.ModTime})
		}
	more:
		for len(batch) < maxBatch {
			select {
			case c := <-cands:
				batch = append(batch, queue.Candidate{Path: c.Path, Root: c.Root, Size: c.Size, ModTime: c.ModTime})
			default:
				break more
			}
		}
		created, err := d.store.EnqueueBatch(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				// Nothing is lost: the watcher reports the files again at its
				// next rescan, since they are not Known.
				d.log.Error().Err(err).Int("files", len(batch)).Msg("cannot record found files; they are retried at the next rescan")
			}
			for _, c := range batch {
				d.watch.Forget(c.Path)
			}
			continue
		}
		n := 0
		for i, ok := range created {
			if ok {
				n++
				d.log.Info().Str("path", batch[i].Path).Int64("size", batch[i].Size).Msg("file found")
			}
		}
		if n > 0 {
			d.pool.Wake()
		}
	}
}

// maintenanceEvery paces the trim of the path index; the first pass runs a
// minute after start, once the startup scan has settled.
const maintenanceEvery = time.Hour

// maintain keeps the state file bounded over months: retention (Prune) also
// runs as jobs finish, but the paths of pruned jobs whose files have gone
// (moved, deleted) are only forgotten here, since that needs a stat per path.
func (d *daemon) maintain(ctx context.Context) {
	wait := time.Minute
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = maintenanceEvery
		if _, err := d.store.Prune(); err != nil {
			d.log.Warn().Err(err).Msg("retention pass failed; tried again later")
			continue
		}
		n, err := d.store.TrimPaths(ctx, func(p string) bool {
			_, err := os.Lstat(p)
			return errors.Is(err, fs.ErrNotExist)
		})
		if err != nil && ctx.Err() == nil {
			d.log.Warn().Err(err).Msg("trimming the path index failed; tried again later")
		} else if n > 0 {
			d.log.Info().Int("paths", n).Msg("forgot the paths of long-finished files that are gone")
		}
	}
}

// statsLoop refreshes the gauges that come from the store, systemd's STATUS
// line and the watchdog. The watchdog is fed only after a successful store
// read, so a wedged state database stops it and systemd restarts splatd.
func (d *daemon) statsLoop(ctx context.Context) {
	wd := watchdogInterval(d.getenv)
	every := 2 * time.Second
	if wd > 0 && wd < every {
		every = wd
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lastStatus := ""
	wasPaused := false
	for {
		// The pool logs the 401 itself; this line says where the token
		// came from, which is what an operator fixes.
		if d.pool.Paused() != nil {
			d.reloadToken()
		}
		if paused := d.pool.Paused(); (paused != nil) != wasPaused {
			wasPaused = paused != nil
			if wasPaused {
				d.log.Error().Str("token_from", string(d.tokenSource())).Err(paused).
					Msg("the API refuses the token: all work is paused and the token is probed with backoff; " + d.tokenAdvice())
			}
		}
		st, err := d.store.Stats()
		if err != nil {
			d.log.Error().Err(err).Msg("reading queue stats")
		} else {
			d.m.SetStages(st.Stages)
			d.m.SetOldestJobAge(st.OldestAge)
			paused := d.pool.Paused()
			d.m.SetTokenRefused(paused != nil)
			status := statusLine(st, paused)
			if status != lastStatus {
				_ = d.notify.send("STATUS=" + status)
				lastStatus = status
			}
			if wd > 0 {
				_ = d.notify.send("WATCHDOG=1")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// tokenAdvice says how to replace a refused token from where it came:
// only a token file can change under a running process; the environment and
// a systemd credential (copied at service start, immutable while it runs)
// need a restart.
func (d *daemon) tokenAdvice() string {
	switch {
	case d.cfg.API.TokenFile != "":
		return "write a valid token to " + d.cfg.API.TokenFile + ": it is picked up within seconds, no restart"
	case d.tokenSource() == tokenSource("the SPLATD_TOKEN environment variable"):
		return "set a valid SPLATD_TOKEN and restart splatd"
	default:
		return "put a valid token in the credential's source (LoadCredential=, e.g. /etc/splatd/token) and restart: systemctl restart splatd"
	}
}

// reloadToken reads the token source again while the API refuses the
// token; a new value is used at once, so fixing a token file needs no
// restart (a credential or the environment cannot change under a running
// process: tokenAdvice says so).
func (d *daemon) reloadToken() {
	tok, source, err := loadToken(d.cfg, d.getenv)
	d.tokMu.Lock()
	same := tok == d.token
	d.tokMu.Unlock()
	if err != nil || same {
		return
	}
	if err := d.client.SetToken(tok); err != nil {
		d.log.Error().Err(err).Str("token_from", string(source)).Msg("the new token is unusable")
		return
	}
	d.tokMu.Lock()
	d.token, d.source = tok, source
	d.tokMu.Unlock()
	d.log.Info().Str("token_from", string(source)).Msg("token changed: trying it now")
	d.pool.ProbeNow()
}

func (d *daemon) tokenSource() tokenSource {
	d.tokMu.Lock()
	defer d.tokMu.Unlock()
	return d.source
}

func statusLine(st queue.Stats, paused error) string {
	active := 0
	for _, s := range []state.Stage{state.Queued, state.Ready, state.Signed, state.Uploaded, state.Publishing, state.Processing} {
		active += st.Stages[s]
	}
	s := fmt.Sprintf("%d active, %d done, %d failed, %d held", active, st.Stages[state.Done], st.Stages[state.Failed], st.Stages[state.Held])
	if paused != nil {
		s = "PAUSED: the API refuses the token; " + s
	}
	return s
}

// drainStore wraps the store for the pool so that shutdown can stop new
// claims and wait for the claimed jobs' current calls to return.
type drainStore struct {
	*queue.Store
	draining atomic.Bool
	mu       sync.Mutex
	held     int
	idleCh   chan struct{}
}

var _ uploader.Store = (*drainStore)(nil)

func (s *drainStore) Claim(now time.Time) (state.Job, bool, error) {
	if s.draining.Load() {
		return state.Job{}, false, nil
	}
	j, ok, err := s.Store.Claim(now)
	if ok {
		s.mu.Lock()
		s.held++
		s.mu.Unlock()
	}
	return j, ok, err
}

func (s *drainStore) Release(id uint64) {
	s.Store.Release(id)
	s.mu.Lock()
	s.held--
	if s.held == 0 && s.idleCh != nil {
		close(s.idleCh)
		s.idleCh = nil
	}
	s.mu.Unlock()
}

func (s *drainStore) start() { s.draining.Store(true) }

// idle is closed once no claimed job remains (at once if none is held).
func (s *drainStore) idle() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.held == 0 {
		close(ch)
		return ch
	}
	s.idleCh = ch
	return ch
}
