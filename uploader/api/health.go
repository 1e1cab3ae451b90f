package api

import (
	"sync"
	"time"
)

// reachability is whether the API answers: the first of the failures in a
// row (no answer, or a 5xx) since the last answer, and the latest one.
type reachability struct {
	mu    sync.Mutex
	since time.Time
	err   error
}

func (r *reachability) failed(now time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.since = now
	}
	r.err = err
}

func (r *reachability) answered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err, r.since = nil, time.Time{}
}

// Unreachable returns the latest error of the API calls that failed in a
// row (no answer, or a 5xx) and when the first of them failed; err is
// nil once the API answered again (any status below 500: a 401 is an
// answer, the token pause reports it). Storage PUTs do not count.
func (c *Client) Unreachable() (err error, since time.Time) {
	c.reach.mu.Lock()
	defer c.reach.mu.Unlock()
	return c.reach.err, c.reach.since
}
