package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/watcher"
	"github.com/splatd/splatd/watcher/trustfs"
)

// intake is the daemon's state around the watcher → queue hand-over:
// which folders' unknown receipts were already reported, and whether a
// failed state store is being watched for its recovery.
type intake struct {
	mu         sync.Mutex
	loggedDirs map[string]bool // folders whose unknown receipts were logged once
	recovering bool            // a goroutine waits for the store to work again
	failures   int             // intake failures since the last good enqueue: the probe's backoff
	storeErr   error           // the last store write that failed, nil once one succeeds: /readyz

	// ping writes to the store (queue.Store.Ping; tests replace it), every
	// probeEvery while the daemon runs, so that a store refusing writes is
	// seen on an idle daemon too.
	ping       func() error
	probeEvery time.Duration
}

// storeProbeEvery is how often the daemon writes to its store to learn
// that it still accepts writes (one small bbolt transaction).
const storeProbeEvery = 30 * time.Second

func newIntake() *intake {
	return &intake{loggedDirs: make(map[string]bool), probeEvery: storeProbeEvery}
}

// adoptFound records the candidates whose receipt proves them published
// (after.Check: done for the same sha256, protocol and service) as adopted
// done jobs, and returns the others, to be queued. Only files with a
// receipt are hashed. A folder holding receipts the state did not know is
// logged once, with a count: a new or lost state directory on published
// files, which before issue 15 published them all again.
func (d *Daemon) adoptFound(ctx context.Context, batch []queue.Candidate) []queue.Candidate {
	svc := d.cfg.ReceiptService()
	rest := batch[:0]
	var adopt []queue.Adoption
	for _, c := range batch {
		ev, err := after.CheckIn(ctx, d.fs, c.Root, c.Path, svc)
		switch {
		case errors.Is(err, after.ErrNoReceipt):
			rest = append(rest, c)
		case err != nil:
			d.log.Warn().Str("path", state.Shown(c.Path)).Err(err).Msg("cannot weigh the file's receipt; it is queued as usual")
			rest = append(rest, c)
		case !ev.Done:
			d.log.Info().Str("path", state.Shown(c.Path)).Str("receipt_status", ev.Receipt.Status).Str("why", ev.Why).
				Msg("the receipt beside the file is not evidence that it is published; it is queued as usual")
			rest = append(rest, c)
		default:
			adopt = append(adopt, after.AdoptionOf(ev, c.Root, d.cfg.TrustedViewerURL))
		}
	}
	jobs, err := d.store.AdoptBatch(ctx, adopt)
	if err != nil {
		// Queuing them instead would publish them again: the watcher
		// hands them over again at its next rescan.
		if ctx.Err() == nil {
			d.log.Error().Err(err).Int("files", len(adopt)-len(jobs)).Msg("cannot record files proven published by their receipts; tried again at the next rescan")
			d.intakeFailed(ctx, err)
		}
		for _, a := range adopt[len(jobs):] {
			d.watch.Forget(a.Path)
		}
	}
	byDir := map[string]int{}
	for _, j := range jobs {
		if j.ID != 0 {
			byDir[filepath.Dir(j.Path)]++
			d.log.Debug().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("splat", j.SplatID).Msg("adopted from its receipt: not published again")
		}
	}
	d.logReceiptDirs(byDir)
	return rest
}

// logReceiptDirs logs, once per folder, that it holds receipts the state
// did not know.
func (d *Daemon) logReceiptDirs(byDir map[string]int) {
	d.intake.mu.Lock()
	defer d.intake.mu.Unlock()
	for dir, n := range byDir {
		if d.intake.loggedDirs[dir] {
			continue
		}
		d.intake.loggedDirs[dir] = true
		d.log.Warn().Str("folder", state.Shown(dir)).Int("receipts", countReceipts(d.fs, dir)).Int("adopted", n).Str("state_dir", d.cfg.StateDir).
			Msg("folder holds receipts this state directory did not know (a new or lost state_dir, or another daemon of a fleet on this folder): files whose receipt says done for their content are adopted as done, not published again (logged once per folder; adopted counts this batch)")
	}
}

// countReceipts counts the receipts in dir, reading its listing a chunk at
// a time: a folder of 100,000 files is never held whole.
func countReceipts(fsys *trustfs.FS, dir string) int {
	r, err := fsys.OpenDir(fsys.RootOf(dir), dir)
	if err != nil {
		return 0
	}
	defer r.Close()
	f, err := r.Open(".")
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	for {
		ents, err := f.ReadDir(receiptChunk)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), after.ReceiptSuffix) && !e.IsDir() {
				n++
			}
		}
		if err != nil || len(ents) == 0 {
			return n
		}
	}
}

// receiptChunk is how many entries countReceipts reads at a time.
const receiptChunk = 1024

// intakeFailed notes that the store refused found files (a full disk):
// they were forgotten by the watcher, and once the store works again a
// full rescan hands them over at once instead of at the next periodic
// rescan. The pool reports its own recovery (storeRecovered); this covers
// an idle pool, whose store is only written to by the intake.
func (d *Daemon) intakeFailed(ctx context.Context, err error) {
	d.intake.mu.Lock()
	d.intake.storeErr = err
	if d.intake.recovering {
		d.intake.mu.Unlock()
		return
	}
	d.intake.recovering = true
	d.intake.failures++
	first := d.intake.failures
	d.intake.mu.Unlock()
	go func() {
		// A small write may succeed on a disk that is still full; the
		// store patience then keeps growing across such false recoveries.
		for n := first; ; n++ {
			t := time.NewTimer(state.Policy{}.Wait(state.ProfileStore, n))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			err := d.pingStore()
			if err == nil {
				d.storeRecovered()
				return
			}
			d.intake.mu.Lock()
			d.intake.storeErr = err
			d.intake.mu.Unlock()
		}
	}()
}

// intakeOK resets the recovery probe's backoff after a good enqueue.
func (d *Daemon) intakeOK() {
	d.intake.mu.Lock()
	d.intake.failures = 0
	d.intake.storeErr = nil
	d.intake.mu.Unlock()
}

func (d *Daemon) pingStore() error {
	if d.intake.ping != nil {
		return d.intake.ping()
	}
	return d.store.Ping()
}

// probeStore writes to the store every probeEvery until ctx ends: a store
// that refuses writes makes the daemon not ready (storeError) even when no
// file arrives and no job runs, until a write succeeds again.
func (d *Daemon) probeStore(ctx context.Context) {
	t := time.NewTicker(d.intake.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := d.pingStore(); err != nil && ctx.Err() == nil {
			d.log.Error().Err(err).Msg("the job store refuses writes; not ready until it accepts one")
			d.intakeFailed(ctx, err)
		}
	}
}

// storeError is the intake's or the probe's last failed store write while
// no write has succeeded since (for /readyz).
func (d *Daemon) storeError() error {
	d.intake.mu.Lock()
	defer d.intake.mu.Unlock()
	return d.intake.storeErr
}

// storeRecovered rescans the watch folders at once: files found while the
// store failed were forgotten and wait for a rescan.
func (d *Daemon) storeRecovered() {
	d.intake.mu.Lock()
	d.intake.recovering = false
	d.intake.storeErr = nil
	d.intake.mu.Unlock()
	if d.watch != nil {
		d.log.Info().Msg("the state store works again: rescanning the watch folders now")
		d.watch.Rescan()
	}
}

// readyProblems adds to /readyz's reasons the configuration error that
// pauses the pool (not ready: nothing is published until it clears).
func (d *Daemon) readyProblems() []string {
	if err, kind, since := d.pool.ConfigError(); err != nil {
		return []string{fmt.Sprintf("configuration error (%s) since %s: %v; all work is paused and tried again with backoff",
			kind, since.Format(time.RFC3339), err)}
	}
	return nil
}

// degraded is /readyz's "degraded:" line (200): after-actions failing.
// Publishing goes on, so the daemon stays ready; the line, the
// splatd_after_action_errors_total metric and its alert tell the operator.
func (d *Daemon) degraded() error { return d.pool.AfterErrors() }

// settingsChanged is the watcher's OnSettings: a sidecar or a folder's
// .splat.yaml was written. The failed jobs whose reason names that file
// (they failed on it, broken) are queued again, so that fixing the file
// is enough; a job that failed for another reason stays failed. It runs
// apart from the watcher's event loop.
func (d *Daemon) settingsChanged(path string) {
	go func() {
		jobs, err := d.store.List(queue.Filter{Stages: []state.Stage{state.Failed}})
		if err != nil {
			d.log.Warn().Err(err).Str("settings", path).Msg("cannot list failed jobs after a settings file changed")
			return
		}
		n := 0
		for _, j := range jobs {
			if !strings.Contains(j.FailReason, path) && !strings.Contains(j.LastError, path) {
				continue
			}
			if _, err := d.store.Retry(j.ID); err != nil {
				d.log.Warn().Err(err).Uint64("job", j.ID).Msg("cannot queue a job again after its settings file changed")
				continue
			}
			n++
		}
		if n > 0 {
			d.log.Info().Str("settings", path).Int("jobs", n).Msg("settings file changed: the jobs that failed on it are queued again")
			d.pool.Wake()
		}
	}()
}

// errNoReceipts: after.receipt is off in the config in force, so no peer's
// receipt is looked for; the pool replays complete at once.
var errNoReceipts = errors.New("receipts are off (after.receipt: false): no peer's receipt to wait for")

// peerReceipt is PoolOptions.PeerReceipt on the config in force (a reload
// may turn receipts on or off).
func (d *Daemon) peerReceipt(j state.Job) (uploader.PeerOutcome, error) {
	if f := peerReceipt(d.fs, d.config()); f != nil {
		return f(j)
	}
	return uploader.PeerOutcome{}, errNoReceipts
}

// peerReceipt is the pool's PeerReceipt: the outcome a fleet peer's
// receipt gives for j's content (after.PeerEvidence), even when the file is
// gone (a peer's delete keeps the receipt beside it, a peer's move takes it
// to success_dir: after.MovedPeerEvidence); ErrNoPeerReceipt while there is
// none that proves it; the stat error when there is none and the file is
// gone (none will come). Nil when this daemon writes no receipts: its fleet
// is taken to write none either.
func peerReceipt(fsys *trustfs.FS, cfg *config.Config) func(j state.Job) (uploader.PeerOutcome, error) {
	if !cfg.After.Receipt {
		return nil
	}
	svc := cfg.ReceiptService()
	return func(j state.Job) (uploader.PeerOutcome, error) {
		// The receipt first: a peer with on_success: delete leaves it where
		// the file was. Only without one does a file gone end the wait,
		// unless a peer moved it: its receipt is where it went.
		r, why, err := after.PeerEvidence(fsys, j.Root, j.Path, j.SHA256, j.Size, svc)
		at := after.ReceiptPath(j.Path)
		if err != nil || why != "" {
			if _, serr := fsys.Lstat(j.Root, j.Path); serr != nil {
				mr, mat, ok := movedPeerReceipt(fsys, cfg, j, svc)
				if !ok {
					return uploader.PeerOutcome{}, serr
				}
				r, why, err, at = mr, "", nil, mat
			}
		}
		switch {
		case errors.Is(err, after.ErrNoReceipt):
			return uploader.PeerOutcome{}, uploader.ErrNoPeerReceipt
		case err != nil:
			// A receipt being replaced: the peer's own is still to come.
			return uploader.PeerOutcome{}, fmt.Errorf("%w (%v)", uploader.ErrNoPeerReceipt, err)
		case why != "":
			// One of older content, or another service's.
			return uploader.PeerOutcome{}, fmt.Errorf("%w (%s)", uploader.ErrNoPeerReceipt, why)
		}
		return uploader.PeerOutcome{
			SplatID: r.Splat.ID, SplatHash: r.Splat.Hash, ViewerURL: cfg.TrustedViewerURL(cmp.Or(r.Splat.ViewerURL, r.Splat.URL)),
			EditURL: r.Splat.EditURL, PublishedAt: r.PublishedAt, CompletedAt: r.CompletedAt,
			Receipt: at,
		}, nil
	}
}

// movedPeerReceipt is the receipt that proves j's content published when
// j's root moves what it published (on_success: move): a fleet shares its
// after settings, so a peer moved the file, and its receipt, where this
// daemon would have. ok is false when there is none that proves it.
func movedPeerReceipt(fsys *trustfs.FS, cfg *config.Config, j state.Job, svc after.Service) (after.Receipt, string, bool) {
	a := cfg.AfterOfRoot(j.Root)
	if a.OnSuccess != "move" || a.SuccessDir == "" {
		return after.Receipt{}, "", false
	}
	r, at, why, err := after.MovedPeerEvidence(fsys, j.Root, j.Path, a.SuccessDir, j.SHA256, j.Size, svc)
	return r, at, err == nil && why == ""
}

// enqueue records each finished file the watcher reports. Enqueue is
// idempotent, so a file reported twice (rescan, restart) is one job. What
// arrives together (a startup scan, a burst) is committed in one
// transaction: one fsync per batch instead of one per file.
func (d *Daemon) enqueue(ctx context.Context, cands <-chan watcher.Candidate) {
	const maxBatch = 512
	batch := make([]queue.Candidate, 0, maxBatch)
	for {
		batch = batch[:0]
		select {
		case <-ctx.Done():
			return
		case c := <-cands:
			batch = append(batch, candidate(c))
		}
	more:
		for len(batch) < maxBatch {
			select {
			case c := <-cands:
				batch = append(batch, candidate(c))
			default:
				break more
			}
		}
		if batch = d.adoptFound(ctx, batch); len(batch) == 0 {
			continue
		}
		created, err := d.store.EnqueueBatch(ctx, batch)
		if err != nil {
			if ctx.Err() == nil {
				// Nothing is lost: the watcher reports the files again at its
				// next rescan (at once when the store recovers), since they
				// are not Known.
				d.log.Error().Err(err).Int("files", len(batch)).Msg("cannot record found files; they are retried when the store works again")
				d.intakeFailed(ctx, err)
			}
			for _, c := range batch {
				d.watch.Forget(c.Path)
			}
			continue
		}
		d.intakeOK()
		n := 0
		for i, ok := range created {
			if ok {
				n++
				d.log.Info().Str("path", state.Shown(batch[i].Path)).Int64("size", batch[i].Size).Msg("file found")
				d.history.Add(metrics.Event{Time: time.Now(), Folder: batch[i].Root, Path: batch[i].Path, Stage: state.Queued,
					Text: "file found, " + state.HumanSize(batch[i].Size)})
			}
		}
		if n > 0 {
			d.pool.Wake()
		}
	}
}

// candidate is the store's form of a file the watcher found.
func candidate(c watcher.Candidate) queue.Candidate {
	return queue.Candidate{Path: c.Path, Root: c.Root, Size: c.Size, ModTime: c.ModTime}
}
