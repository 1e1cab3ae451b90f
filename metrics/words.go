package metrics

import (
	"fmt"
	"math"
	"time"

	"github.com/splatd/splatd/state"
)

// Doing is what a job does now that its stage alone does not say: the
// facts Activity puts into words.
type Doing struct {
	// Upload is its bytes going out; Check its content being read (Step:
	// hashing, bundling, encoding).
	Upload *Progress
	Check  *Progress
	// Parked says why it waits on another daemon of a fleet.
	Parked string
	// RateLimit says why its request waits on the rate limit
	// ("strict: no request left in the window, until 20:31:05 UTC").
	RateLimit string
	// WorkerWait: it is due, but every worker is busy ("a free worker
	// (2 of 2 busy)").
	WorkerWait string
	// NextTry is when it is tried again after a backoff.
	NextTry time.Time
	// AfterAction and AfterError: a final job's after-action keeps failing.
	AfterAction, AfterError string
}

// Activity is the one wording of what a job in stage does now, shared by
// `splatd jobs`, /api/jobs and the status page: "uploading 610.0 MiB of
// 1.5 GiB (40 %), 19.6 MiB/s, ETA 46 s", "hashing …", "next try in 12 s",
// "parked: …", "rate limit …", "waiting for a free worker …". "" when the
// stage says it all.
func Activity(stage state.Stage, d Doing, now time.Time) string {
	switch {
	case d.AfterError != "":
		return fmt.Sprintf("after-action %s failed (tried again): %s", d.AfterAction, d.AfterError)
	case stage.Final():
		return ""
	case d.Upload != nil && d.Upload.Size > 0:
		return "uploading " + bytesDone(*d.Upload)
	case d.Check != nil && d.Check.Size > 0:
		return d.Check.Step + " " + bytesDone(*d.Check)
	case d.RateLimit != "":
		return "rate limit " + d.RateLimit
	case d.Parked != "":
		return "parked: " + d.Parked
	case d.WorkerWait != "":
		return "waiting for " + d.WorkerWait
	case d.NextTry.After(now) && stage == state.Processing:
		return "the service processes it; next look in " + inDuration(d.NextTry.Sub(now))
	case d.NextTry.After(now):
		return "next try in " + inDuration(d.NextTry.Sub(now))
	}
	return ""
}

// bytesDone is "610.0 MiB of 1.5 GiB (40 %), 19.6 MiB/s, ETA 46 s".
func bytesDone(p Progress) string {
	pct := min(100, int64(math.Floor(100*float64(p.Sent)/float64(p.Size))))
	return fmt.Sprintf("%s of %s (%d %%)", humanBytes(float64(p.Sent)), humanBytes(float64(p.Size)), pct) + rateETA(p)
}

// inDuration is a wait in whole units: "12 s", "4 min", "2 h".
func inDuration(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	switch {
	case s < 90:
		return fmt.Sprintf("%d s", s)
	case s < 5400:
		return fmt.Sprintf("%d min", int64(math.Round(float64(s)/60)))
	}
	return fmt.Sprintf("%d h", int64(math.Round(float64(s)/3600)))
}
