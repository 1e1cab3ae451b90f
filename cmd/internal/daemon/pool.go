package daemon

import (
	"context"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/notify"
	"github.com/splatd/splatd/watcher/trustfs"
)

// PoolOptions are the pool's options the config sets, for `splatd run` and
// `splatd publish` alike; what the config leaves out is uploader.Defaults.
func PoolOptions(cfg *config.Config, client *api.Client) uploader.PoolOptions {
	return uploader.PoolOptions{
		Client:        client,
		Workers:       cfg.Workers,
		Protocol:      cfg.API.Protocol,
		ParallelParts: cfg.Upload.ParallelParts,
		Files:         poolFiles{fs: cfg.TrustFS(), params: cfg, live: func() *config.Config { return cfg }},
		OnUncertain:   cfg.Publish.OnUncertain,
		Timing: uploader.Timing{
			Poll: uploader.PollOptions{
				Interval:    cfg.Poll.Interval.D(),
				MaxInterval: cfg.Poll.MaxInterval.D(),
				Timeout:     cfg.Poll.Timeout.D(),
			},
			Settle:            max(cfg.Settle.D(), 100*time.Millisecond),
			IncompleteTimeout: cfg.IncompleteWait(),
			MaxServerWait:     cfg.API.MaxServerWait.D(),
		},
	}
}

// newPool builds the worker pool with its after-actions.
func (d *Daemon) newPool() (*uploader.Pool, error) {
	cfg := d.cfg
	d.actions.Store(d.afterRunners(cfg))
	o := PoolOptions(cfg, d.client)
	o.Store = d.store
	o.WorkDir = cfg.StateDir
	o.Files = d.poolFiles(cfg)
	o.Timing.ProbeAPI = apiProbe
	o.Peers = poolPeers{d}
	o.After = d.finisher()
	o.Observer = poolObserver{Metrics: d.m, d: d}
	o.Logger = d.log
	return uploader.NewPool(o)
}

// poolFiles is the pool's uploader.Files: the files read through fs, their
// publish parameters from params (the config of the last reload of publish
// or watch), follow_symlinks and size bounds from live, the config in force
// (a reload may add a root).
type poolFiles struct {
	fs     *trustfs.FS
	params *config.Config
	live   func() *config.Config
}

// poolFiles are the Files of params with d's trust boundary and config in
// force.
func (d *Daemon) poolFiles(params *config.Config) poolFiles {
	return poolFiles{fs: d.fs, params: params, live: d.config}
}

func (f poolFiles) FS() *trustfs.FS { return f.fs }
func (f poolFiles) Params(path, _ string, mod time.Time) (state.PublishParams, error) {
	return f.params.ParamsFor(f.fs, path, mod)
}
func (f poolFiles) FollowSymlinks(root string) bool { return f.live().FollowsSymlinks(root) }
func (f poolFiles) SizeBounds(root string) (int64, int64) {
	return f.live().SizeBounds(root)
}

// poolPeers is the pool's uploader.Peers: receipts on the config in force
// (peerReceipt) and the fleet, if any (poolFleet).
type poolPeers struct{ d *Daemon }

func (p poolPeers) Receipt(j state.Job) (uploader.PeerOutcome, error) { return p.d.peerReceipt(j) }
func (p poolPeers) Fleet() uploader.Fleet                             { return p.d.poolFleet() }

// poolObserver is the pool's uploader.Observer: the metrics, the status
// page's events and the daemon's own hooks.
type poolObserver struct {
	*metrics.Metrics
	d *Daemon
}

func (o poolObserver) Transition(j state.Job, from state.Stage) {
	o.d.record(j, transitionText(j, from))
	if o.d.o.OnTransition != nil {
		o.d.o.OnTransition(j, from)
	}
}

func (o poolObserver) StoreRecovered() { o.d.storeRecovered() }

// finisher returns the after-action stage of a final job, for the pool and
// an operator's cancel.
func (d *Daemon) finisher() finisher { return finisher{current: d.actions.Load, events: d.events} }

// finisher is the pool's uploader.Finisher: the after-actions of the job's
// root, then its notifications (queued, never waited for). A Finish that
// fails runs again, so its events go out once it has succeeded; a crash
// between the two can repeat them (the event's job id tells them apart).
type finisher struct {
	current func() *after.Runners // a reload may replace them
	events  *notify.Notifier
}

func (f finisher) Finish(ctx context.Context, j state.Job) error {
	rec, err := f.current().Finish(ctx, j)
	if err != nil {
		return err
	}
	f.events.Finished(j.Root, rec)
	return nil
}

// The pool's interfaces, implemented here.
var (
	_ uploader.Files    = poolFiles{}
	_ uploader.Peers    = poolPeers{}
	_ uploader.Observer = poolObserver{}
	_ uploader.Finisher = finisher{}
)
