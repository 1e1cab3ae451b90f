package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
)

// maintenanceEvery paces the trim of the path index; the first pass runs a
// minute after start, once the startup scan has settled.
const maintenanceEvery = time.Hour

// maintain keeps the state file bounded over months: retention (Prune) also
// runs as jobs finish, but the paths of pruned jobs whose files have gone
// (moved, deleted) are only forgotten here, since that needs a stat per path.
func (d *Daemon) maintain(ctx context.Context) {
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
			_, err := d.fs.Lstat(d.fs.RootOf(p), p)
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
func (d *Daemon) statsLoop(ctx context.Context) {
	wd := watchdogInterval(d.o.Getenv)
	every := 2 * time.Second
	if wd > 0 && wd < every {
		every = wd
	}
	t := time.NewTicker(every)
	defer t.Stop()
	lastStatus := ""
	for {
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
				_ = d.systemd.send("STATUS=" + status)
				lastStatus = status
			}
			if wd > 0 {
				_ = d.systemd.send("WATCHDOG=1")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
