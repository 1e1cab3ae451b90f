package uploader

import "time"

// Observer receives the pool's measurements (the client has its own,
// api.Observer). The metrics package implements both; cmd/splatd asserts it.
type Observer interface {
	// JobFinished records a job reaching a terminal stage. result is
	// "done", "failed", "duplicate", "held" or "canceled".
	JobFinished(result string, d time.Duration)
}

// NopObserver is an Observer that records nothing.
type NopObserver struct{}

func (NopObserver) JobFinished(string, time.Duration) {}
