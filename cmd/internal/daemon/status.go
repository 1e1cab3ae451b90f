package daemon

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/splatd/splatd/cmd/internal/config"
	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/pace"
	"github.com/splatd/splatd/watcher"
)

// statusView is what the status endpoints (/api/status, /api/jobs and the
// page at /) read of the daemon: in-memory state and the job store, never
// the network, never a secret.
type statusView struct{ d *Daemon }

var _ metrics.StatusSource = statusView{}

// Status implements metrics.StatusSource.
func (v statusView) Status(context.Context) (metrics.Status, error) {
	d := v.d
	st, err := d.store.Stats()
	if err != nil {
		return metrics.Status{}, err
	}
	out := metrics.Status{
		Version:  v.d.o.Version,
		Protocol: d.cfg.API.Protocol,
		Token:    metrics.Token{State: metrics.TokenOK},
		Queue:    make(map[state.Stage]int, len(state.Stages)),
		Time:     time.Now(),
	}
	for _, s := range state.Stages {
		out.Queue[s] = st.Stages[s]
	}
	roots := map[string]watcher.RootState{}
	for _, r := range d.watch.RootStates() {
		roots[r.Path] = r
	}
	jobs, err := d.store.List(queue.Filter{})
	if err != nil {
		return metrics.Status{}, err
	}
	counts := tally(jobs, out.Time, &out)
	for _, w := range d.config().Watch { // as reloaded
		r := roots[w.Path]
		out.Watched = append(out.Watched, metrics.Folder{Path: w.Path, Recursive: *w.Recursive, Polling: w.Mode == "poll" || r.Polling,
			LastScan: r.LastScan, Error: r.Error, Jobs: counts[w.Path]})
	}
	for _, f := range d.watch.Settling() {
		out.Settling = append(out.Settling, metrics.Settling{Path: f.Path, Folder: f.Root, Size: f.Size, Since: f.Since, Changed: f.Changed})
	}
	out.Throughput, out.Today.Sent, out.Today.Since = d.m.Sent(out.Time)
	if err := d.pool.Paused(); err != nil {
		out.Token = metrics.Token{State: metrics.TokenRefused, Advice: d.client.Token().Advice()}
	}
	// The limiter, not the config: it holds what reloads set.
	lim := d.client.Limiter()
	out.Bandwidth = metrics.Bandwidth{Limit: lim.Rate(), Rate: float64(lim.ObservedRate()), InFlight: d.uploadsInFlight()}
	parked := parkedOn(jobs, out.Time)
	for _, c := range d.pacer.Classes() {
		name := pace.ClassName(c.Limit)
		out.Pacing = append(out.Pacing, metrics.Pacing{Class: name, Limit: c.Limit, Remaining: c.Remaining, Reset: c.Reset,
			Waiting: c.Waiting, Parked: parked[name]})
	}
	return out, nil
}

// parkedOn counts the jobs parked on each limit class's window at now.
func parkedOn(jobs []state.Job, now time.Time) map[string]int {
	n := map[string]int{}
	for _, j := range jobs {
		if d, ok := (Live{}).RateDelay(j, now); ok {
			n[d.Class]++
		}
	}
	return n
}

// Jobs implements metrics.StatusSource: the most recently updated first,
// with the progress of running uploads.
func (v statusView) Jobs(_ context.Context, q metrics.JobQuery) (metrics.JobList, error) {
	jobs, err := v.d.store.List(queue.Filter{Stages: q.Stages})
	if err != nil {
		return metrics.JobList{}, err
	}
	live := LiveOf(v.d.pool)
	jobs = withChecked(jobs, q.Stages, live, v.d.store.Get)
	slices.SortStableFunc(jobs, func(a, b state.Job) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	out := metrics.JobList{Total: len(jobs)}
	now := time.Now()
	for _, j := range jobs[:min(len(jobs), q.Limit)] {
		view := metrics.JobFromState(j)
		view.ViewerURL = shownViewerURL(v.d.cfg, view.ViewerURL, j.Adopted)
		do := live.doing(j, now)
		view.Progress, view.Check = do.Upload, do.Check
		view.Activity = metrics.Activity(j.Stage, do, now)
		if !j.Stage.Final() && j.NextAttempt.After(now) {
			view.NextTry = j.NextAttempt
		}
		out.Jobs = append(out.Jobs, view)
	}
	return out, nil
}

// doing gathers what the workers know j does now, for metrics.Activity:
// the one wording of it in `splatd jobs`, /api/jobs and the page.
func (l Live) doing(j state.Job, now time.Time) metrics.Doing {
	do := metrics.Doing{Parked: j.Parked, WorkerWait: l.WorkerWait(j, now)}
	if j.Stage.Final() {
		do.Parked, do.WorkerWait = "", ""
		if j.AfterError != "" {
			do.AfterAction, do.AfterError = j.AfterAction, j.AfterError
		}
		return do
	}
	do.NextTry = j.NextAttempt
	if p, ok := l.Progress[j.ID]; ok {
		pv := progressView(p)
		do.Upload = &pv
	} else if c, ok := l.Check(j); ok {
		pv := progressView(c)
		do.Check = &pv
	}
	if d, ok := l.RateDelay(j, now); ok {
		do.RateLimit = DelayText(d)
	}
	return do
}

// tally counts jobs by folder, and fills in out's backlog (the jobs not
// final) and what was published today (jobs done since local midnight).
func tally(jobs []state.Job, now time.Time, out *metrics.Status) map[string]metrics.FolderJobs {
	y, m, day := now.Date()
	midnight := time.Date(y, m, day, 0, 0, 0, 0, now.Location())
	counts := map[string]metrics.FolderJobs{}
	for _, j := range jobs {
		c := counts[j.Root]
		switch {
		case j.Stage == state.Queued:
			c.Waiting++
		case j.Stage == state.Done:
			c.Done++
			if !j.UpdatedAt.Before(midnight) && j.DuplicateOf == 0 && !j.Adopted {
				out.Today.Published++
				out.Today.PublishedBytes += j.Size
			}
		case j.Stage == state.Failed || j.Stage == state.Held:
			c.Failed++
		case !j.Stage.Final():
			c.Active++
		}
		if !j.Stage.Final() {
			out.Backlog.Files++
			out.Backlog.Bytes += j.Size
		}
		counts[j.Root] = c
	}
	return counts
}

// withChecked adds to jobs, listed in stages, the queued jobs whose check
// runs now (hashing their file: at most one a worker) when stages are those
// after the check (the page's "in progress", from ready on) and not queued
// itself: a long hash is work in progress, not a job waiting in the queue.
func withChecked(jobs []state.Job, stages []state.Stage, live Live, get func(uint64) (state.Job, error)) []state.Job {
	if len(live.Checks) == 0 || !slices.Contains(stages, state.Ready) || slices.Contains(stages, state.Queued) {
		return jobs
	}
	ids := slices.Sorted(maps.Keys(live.Checks))
	for _, id := range ids {
		if j, err := get(id); err == nil && j.Stage == state.Queued {
			jobs = append(jobs, j)
		}
	}
	return jobs
}

// progressView is a worker's progress as the status endpoints show it.
func progressView(p uploader.Progress) metrics.Progress {
	return metrics.Progress{Step: p.Step, Sent: p.Sent, Size: p.Size, Rate: p.Rate, ETA: p.ETA.Round(time.Second).Seconds()}
}

// uploadsInFlight is the bytes of the uploads in progress still to be sent.
func (d *Daemon) uploadsInFlight() int64 {
	var n int64
	for _, p := range d.pool.Progress() {
		n += max(p.Size-p.Sent, 0)
	}
	return n
}

// shownViewerURL is the viewer link the status page and `splatd jobs` show:
// the API's answer as it is, and a link read from a receipt (an adopted
// job) only while it points to a viewer host (api.viewer_hosts). Links from
// receipts were weighed when they were read; this weighs them again against
// the viewer hosts in force. A link the API gave is the API's, wherever its
// viewer lives.
func shownViewerURL(cfg *config.Config, url string, adopted bool) string {
	if !adopted {
		return url
	}
	return cfg.TrustedViewerURL(url)
}
