package uploader

import (
	"context"
	"errors"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/pace"
)

// A held request gives its worker back. The pacer (one per token, shared
// by the workers) holds a request back while its class's window is spent,
// until the window's Reset or a 429's Retry-After: up to a whole window.
// A worker that sat in that wait left the jobs it could run meanwhile (the
// polls of processing jobs, in another class with budget; the hashing of
// queued files) waiting too. So a step whose request the pacer would hold
// until a known time more than rateParkMin away ends there, before the
// request is sent: the job is committed parked in its stage, due at the
// hold's end (Job.RateLimited says why, for `splatd jobs` and the status
// page), with neither an attempt charged nor a backoff (it failed nothing),
// and the worker claims other work. Nothing is lost or done twice: the
// request never left, and a step commits its side effects before its next
// call as for any error (a publish's reservation is taken in stage
// uploaded, before the intent: it parks there, never in publishing).
//
// Holds that keep blocking: a hold whose end is unknown (the answer of a
// request in flight decides it; it is short) or nearer than rateParkMin
// (parking costs a commit and a claim, and the job would be due again
// before the worker had done much else); a part URL signing of the v1
// parts phase while part PUTs are in flight, which share the step's context
// (cancelling it would cut them and waste their bytes; the phase's first
// signing, before any PUT, parks); and `splatd publish`, which has nothing
// else to do.

// rateParkMin is the shortest hold that parks its job. 2 s: a shorter hold
// would free the worker for about one poll while the park costs two store
// commits (park, then the step at its end) and a claim, and holds that
// short are the common ones a window's reset jitter or a 1 s Retry-After
// make; the holds that starved polls last a window (10 s to a minute).
const rateParkMin = 2 * time.Second

// rateHeld is the cause that ends a step whose request the pacer holds
// back until h.Until.
type rateHeld struct{ h pace.Hold }

func (e *rateHeld) Error() string {
	return "rate limit " + e.h.Class + ": " + e.h.Reason + " (request not sent; the job is parked)"
}

// stepContext returns the context job id's step runs in: its pacer waits
// show in Holds, and a hold until a known time more than rateParkMin away
// ends the context with a *rateHeld cause (rateParked), which makes Wait
// return before anything is sent.
func (p *Pool) stepContext(ctx context.Context, id uint64) (context.Context, context.CancelCauseFunc) {
	sctx, cancel := context.WithCancelCause(ctx)
	return pace.WithHoldReport(sctx, func(h pace.Hold) {
		p.setHold(id, h)
		if !h.Until.IsZero() && h.Until.Sub(p.o.Now()) > rateParkMin {
			cancel(&rateHeld{h})
		}
	}), cancel
}

// blockingHolds returns ctx whose pacer waits show in Holds but never
// park: for calls made while others of the step are in flight on ctx.
func (p *Pool) blockingHolds(ctx context.Context, id uint64) context.Context {
	return pace.WithHoldReport(ctx, func(h pace.Hold) { p.setHold(id, h) })
}

// rateParked returns the hold that ended the step of ctx, if one did.
func rateParked(ctx context.Context) (pace.Hold, bool) {
	var rh *rateHeld
	if errors.As(context.Cause(ctx), &rh) {
		return rh.h, true
	}
	return pace.Hold{}, false
}

// parkOnHold returns j (the step's job, in its stage) parked until the
// hold ends: not an attempt, not a backoff.
func (p *Pool) parkOnHold(j state.Job, h pace.Hold) state.Job {
	p.setParkedOn(j.ID, h)
	j.NextAttempt = h.Until
	j.RateLimited = &state.RateWait{Class: h.Class, Reason: h.Reason, Until: h.Until}
	j.LastError, j.LastStatus = "", 0
	p.log.Info().Uint64("job", j.ID).Str("path", j.Path).Str("stage", string(j.Stage)).Str("class", h.Class).
		Str("reason", h.Reason).Time("until", h.Until).Msg("the rate limit holds the job's next request: parked until then, the worker takes other work")
	return j
}

// waitObserver is the metrics hook of the time spent waiting on the rate
// limit (metrics.Metrics implements it): a parked job's wait is counted in
// ratelimit_wait_seconds_total as a held request's is.
type waitObserver interface {
	RateLimitWait(d time.Duration)
}

// countParkedWait counts, as j is claimed again, the time it waited parked
// on its rate-limit hold: from the park's commit (UpdatedAt) to now, or to
// the hold's end if it waited for a worker after it. The job carries both,
// so a park from before a restart counts too.
func (p *Pool) countParkedWait(j state.Job) {
	obs, ok := p.o.Observer.(waitObserver)
	if w := j.RateLimited; ok && w != nil {
		end := p.o.Now()
		if end.After(w.Until) {
			end = w.Until
		}
		if d := end.Sub(j.UpdatedAt); d > 0 {
			obs.RateLimitWait(d)
		}
	}
}

// setParkedOn records that job id is parked on hold h; a zero Hold ends it
// (the job is claimed again).
func (p *Pool) setParkedOn(id uint64, h pace.Hold) {
	p.progMu.Lock()
	defer p.progMu.Unlock()
	if h == (pace.Hold{}) {
		delete(p.parkedOn, id)
		return
	}
	p.parkedOn[id] = h
}

// RateParked counts, by rate-limit class, the jobs parked on a hold that
// has not ended at now (parked since this start: a job parked before a
// restart is counted once it is parked again). The status page shows it
// beside the requests the pacer holds back.
func (p *Pool) RateParked(now time.Time) map[string]int {
	p.progMu.Lock()
	defer p.progMu.Unlock()
	out := map[string]int{}
	for id, h := range p.parkedOn {
		if !h.Until.After(now) {
			delete(p.parkedOn, id) // due: it no longer waits on the limit
			continue
		}
		out[h.Class]++
	}
	return out
}
