package uploader

import (
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/pace"
)

// rateParkMin is the shortest delay that parks its job (docs/architecture.md,
// "Pacing"): a shorter one costs two commits and a claim for about one poll.
const rateParkMin = 2 * time.Second

// park returns j (the step's job, in its stage) parked until d ends: the
// pacer delayed its next request, which was not sent; not an attempt.
func (p *Pool) park(j state.Job, d pace.Delay) state.Job {
	j.NextAttempt = d.Until
	j.RateLimited = &state.RateWait{Class: d.Class, Reason: d.Reason, Until: d.Until}
	j.LastError, j.LastStatus = "", 0
	p.log.Info().Uint64("job", j.ID).Str("path", state.Shown(j.Path)).Str("stage", string(j.Stage)).Str("class", d.Class).
		Str("reason", d.Reason).Time("until", d.Until).Msg("the rate limit delays the job's next request: parked until then, the worker takes other work")
	return j
}

// countParkedWait counts, as j is claimed again, the time it waited parked:
// from the park's commit (UpdatedAt) to now, at most to the delay's end.
func (p *Pool) countParkedWait(j state.Job) {
	if w := j.RateLimited; w != nil {
		end := p.o.Now()
		if end.After(w.Until) {
			end = w.Until
		}
		if d := end.Sub(j.UpdatedAt); d > 0 {
			p.o.Observer.RateLimitWait(d)
		}
	}
}
