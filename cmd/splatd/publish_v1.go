package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/splatfile"
)

// publishV1 is `splatd publish` under api.protocol v1: the file goes through
// the daemon's own v1 steps (an upload session, parts in parallel, complete,
// poll), on a throwaway job store in a temporary folder, one file at a time
// so that the progress bar covers all of its parts. Like the legacy one-shot
// publish it keeps nothing: run again, it publishes again (a new session
// key each run, since the store, and with it the generation, is new; the
// content-derived key still finds a session an interrupted run left).
func publishV1(ctx context.Context, c *cli, a *apiEnv, path string) error {
	if _, err := splatfile.Check(path); err != nil {
		return fmt.Errorf("not publishable: %s", oneLine(splatfile.Reason(err)))
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "splatd-publish-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := queue.Open(dir, queue.Options{Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	defer store.Close()
	root := filepath.Dir(path)
	defaults := a.cfg.Publish.Params()
	if w, ok := a.cfg.WatchOf(path); ok {
		defaults, root = a.cfg.PublishFor(w), w.Path
	}
	if _, err := store.EnqueueBatch(ctx, []queue.Candidate{{Path: path, Root: root, Size: fi.Size(), ModTime: fi.ModTime()}}); err != nil {
		return err
	}
	bar := newProgress(c.stderr, filepath.Base(path))
	stages := make(chan string, 64) // the pool's goroutine hands stage changes to the bar's
	pool, err := uploader.NewPool(uploader.PoolOptions{
		Store: store, Client: a.client, Workers: 1,
		Protocol: uploader.ProtocolV1, ParallelParts: a.cfg.Upload.ParallelParts,
		Publish: defaults, EncodeDir: filepath.Join(a.cfg.StateDir, "encoded"),
		Poll: uploader.PollOptions{
			Interval: a.cfg.Poll.Interval.D(), MaxInterval: a.cfg.Poll.MaxInterval.D(), Timeout: a.cfg.Poll.Timeout.D(),
		},
		Settle:    100 * time.Millisecond,
		BundleDir: filepath.Join(dir, "sog-bundles"),
		OnTransition: func(j state.Job, from state.Stage) {
			select {
			case stages <- string(j.Stage):
			default:
			}
		},
		Logger: zerolog.Nop(),
	})
	if err != nil {
		return err
	}
	j, err := runUntilFinal(ctx, store, pool, func() {
		for len(stages) > 0 {
			bar.stage(<-stages, "")
		}
		for _, p := range pool.Progress() {
			bar.update(p.Sent, p.Size)
		}
	})
	bar.done()
	switch {
	case err != nil:
		return err
	case j.Stage != state.Done:
		msg := j.FailReason
		if msg == "" {
			msg = j.LastError
		}
		if j.ViewerURL != "" {
			return fmt.Errorf("%s (splat %s, %s)", msg, j.SplatID, j.ViewerURL)
		}
		return errors.New(msg)
	}
	fmt.Fprintf(c.stdout, "%s\t%s\n", path, j.ViewerURL)
	return nil
}

// runUntilFinal runs pool until the store's one job is final, calling tick
// every 200 ms meanwhile, and returns that job.
func runUntilFinal(ctx context.Context, store *queue.Store, pool *uploader.Pool, tick func()) (state.Job, error) {
	pctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- pool.Run(pctx) }()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case err := <-errc:
			if err == nil {
				err = ctx.Err()
			}
			if err == nil {
				err = errors.New("the upload stopped before it finished")
			}
			return state.Job{}, err
		case <-t.C:
		}
		tick()
		j, err := store.Get(1)
		if err != nil {
			return state.Job{}, err
		}
		if j.Stage.Final() {
			stop()
			<-errc
			return j, nil
		}
	}
}
