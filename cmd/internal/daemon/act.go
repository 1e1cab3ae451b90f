package daemon

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/splatd/splatd/metrics"
	"github.com/splatd/splatd/state"
)

// viaSocket is where the CLI's actions come from, for their log line.
const viaSocket = "admin socket"

// actResult is what an action did: how many jobs it moved, the job (a
// control op's, as it now is), and the CLI's sentence for it.
type actResult struct {
	N     int
	Job   state.Job
	Text  string
	Hints []string // a retry's warnings (RetryHints)
}

// act carries out an operator's action on a job: retry (ref "failed":
// every failed job), cancel, republish or forget, for the admin socket
// (`splatd retry`, `cancel`, …) and the status page alike, and logs it
// with where it came from (via). The daemon then does what the store
// alone cannot: wakes a worker, stops an upload, finishes a canceled job,
// looks for a forgotten file again.
func (d *Daemon) act(ctx context.Context, op, ref, via string) (actResult, error) {
	if op == "retry" {
		hints := RetryHints(d.store, ref)
		n, err := Retry(d.store, ref)
		if err != nil {
			return actResult{}, err
		}
		d.pool.Wake()
		if ref == "failed" {
			d.log.Info().Int("retried", n).Str("via", via).Msg("failed jobs queued again by an operator")
			return actResult{N: n, Text: RetryDone(ref, n), Hints: hints}, nil
		}
		id, _ := strconv.ParseUint(ref, 10, 64) // Retry parsed it
		j, _ := d.store.Get(id)                 // as the retry left it (queued; a held job uploaded)
		j.ID = id
		d.log.Info().Uint64("job", id).Str("path", state.Shown(j.Path)).Str("via", via).Msg("job queued again by an operator")
		d.record(j, "retry by an operator, via "+via)
		return actResult{N: n, Text: RetryDone(ref, n), Hints: hints}, nil
	}
	cop, ok := ControlOps[op]
	if !ok {
		return actResult{}, fmt.Errorf("no action %q", op)
	}
	j, err := Control(d.fs, d.store, cop, ref)
	if err != nil {
		return actResult{}, err
	}
	log := d.log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("via", via)
	switch op {
	case "cancel":
		// The store says canceled; a worker still running the job's step
		// (an upload) is stopped now, so that no more bytes go out.
		log.Bool("stopped_in_flight", d.pool.Abort(j.ID)).Msg("job canceled by an operator")
		d.m.JobFinished("canceled", j.UpdatedAt.Sub(j.CreatedAt))
		if err := d.finisher().Finish(ctx, j); err != nil {
			d.log.Error().Uint64("job", j.ID).Err(err).Msg("after-action failed; will run again at next start")
		} else if err := d.store.MarkFinalized(j.ID); err != nil {
			d.log.Error().Uint64("job", j.ID).Err(err).Msg("cannot record after-action")
		}
	case "republish":
		log.Int("generation", j.Generation).Msg("job queued to be published again by an operator")
		d.pool.Wake()
	case "forget":
		log.Msg("job forgotten by an operator")
		if j.Path != "" { // a record that could not be read may name none
			d.watch.Rediscover(j.Path)
		}
	}
	d.record(j, op+" by an operator, via "+via)
	return actResult{N: 1, Job: j, Text: cop.Done(j)}, nil
}

// RetryDone says what a retry of ref (a job id, or "failed") did, for
// `splatd retry` and the page alike.
func RetryDone(ref string, n int) string {
	if ref == "failed" {
		return fmt.Sprintf("re-queued %d job(s)", n)
	}
	return fmt.Sprintf("re-queued 1 job (job %s)", ref)
}

// pageAct is the status page's metrics.ServerOptions.Act.
func (d *Daemon) pageAct(ctx context.Context, a metrics.Action) (string, error) {
	r, err := d.act(ctx, a.Op, strconv.FormatUint(a.Job, 10), a.From)
	return strings.Join(append([]string{r.Text}, r.Hints...), "; "), err
}

// record adds an event of j to the page's history.
func (d *Daemon) record(j state.Job, text string) {
	d.history.Add(metrics.Event{Time: time.Now(), Job: j.ID, Folder: j.Root, Path: j.Path, Stage: j.Stage, Text: text})
}

// transitionText is what a stage change reads in the page's history.
func transitionText(j state.Job, from state.Stage) string {
	s := string(from) + " → " + string(j.Stage)
	switch {
	case j.Stage == state.Failed:
		s += ": " + j.FailReason
	case j.Stage == state.Held:
		s += ": " + j.TaskMessage
	case j.Stage == state.Done && j.DuplicateOf != 0:
		s += fmt.Sprintf(": the same content as job %d", j.DuplicateOf)
	case j.Stage == state.Done && j.SplatID != "":
		s += ": splat " + j.SplatID
	}
	return s
}
