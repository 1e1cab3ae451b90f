package api

import "time"

// Observer receives the client's measurements. The metrics package
// implements it; api stays free of Prometheus so that tests and the one-shot
// CLI run without a registry. Implementations must be safe for concurrent
// use and must not block.
type Observer interface {
	// APIRequest records one finished HTTP exchange. route is one of the
	// Route* constants; code is the HTTP status, or 0 when no response came.
	APIRequest(route string, code int, d time.Duration)
	// RateLimit records the latest X-RateLimit-Remaining seen for a class.
	RateLimit(class string, remaining int)
	// RateLimitWait records the time the pacer delayed a request
	// (pace.Options.Waited: the daemon's pacer, or the client's own).
	RateLimitWait(d time.Duration)
	// UploadBytes records bytes written to storage (called as they go).
	UploadBytes(n int64)
	// UploadDone records one completed storage PUT.
	UploadDone(d time.Duration)
}

// NopObserver is an Observer that records nothing.
type NopObserver struct{}

func (NopObserver) APIRequest(string, int, time.Duration) {}
func (NopObserver) RateLimit(string, int)                 {}
func (NopObserver) RateLimitWait(time.Duration)           {}
func (NopObserver) UploadBytes(int64)                     {}
func (NopObserver) UploadDone(time.Duration)              {}
