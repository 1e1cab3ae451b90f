package uploader

import (
	"time"

	"github.com/splatd/splatd/state"
)

// Observer is told what the pool does: its measurements (metrics.Metrics
// has them; the client has its own, api.Observer) and its events. No
// method may block.
type Observer interface {
	// JobFinished records a job reaching a terminal stage. result is
	// "done", "failed", "duplicate", "held" or "canceled".
	JobFinished(result string, d time.Duration)
	// Transition sees every committed stage change, after its log line.
	Transition(j state.Job, from state.Stage)
	// StoreRecovered says the job store works again after failing.
	StoreRecovered()
	// ConfigError says a configuration error of kind began or ended.
	ConfigError(kind string, active bool)
	// AfterActionError counts a failed after-action.
	AfterActionError(action string)
	// RateLimitWait records the time a job waited parked on the rate limit.
	RateLimitWait(d time.Duration)
}

// NopObserver is an Observer that records nothing.
type NopObserver struct{}

func (NopObserver) JobFinished(string, time.Duration) {}
func (NopObserver) Transition(state.Job, state.Stage) {}
func (NopObserver) StoreRecovered()                   {}
func (NopObserver) ConfigError(string, bool)          {}
func (NopObserver) AfterActionError(string)           {}
func (NopObserver) RateLimitWait(time.Duration)       {}
