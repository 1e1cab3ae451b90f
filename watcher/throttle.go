package watcher

import (
	"context"
	"time"
)

// maxScanPending is how many pending files make a scan wait for the
// tracker to settle and emit some: a first scan of a folder of 100,000
// files then holds a few thousand entries at a time, not all of them.
const maxScanPending = 4096

// throttle blocks the scan while t holds maxPending files or more, until
// half of them are gone or ctx ends; it gives up when half are not gone
// within twice the settle time plus a second (files held by min_age, or a
// reader that stopped reading candidates). It returns false once it gave up: the rest of the scan then
// goes on unthrottled, as scans did before.
func (t *tracker) throttle(ctx context.Context) bool {
	t.mu.Lock()
	n := len(t.pending)
	t.mu.Unlock()
	if n < t.maxPending {
		return true
	}
	stall := time.NewTimer(2*t.settle + time.Second)
	defer stall.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-stall.C:
			return false
		case <-t.drained:
		}
		t.mu.Lock()
		n = len(t.pending)
		t.mu.Unlock()
		if n <= t.maxPending/2 {
			return true
		}
	}
}

// left tells a waiting scan that a file left the pending set; t.mu is held.
func (t *tracker) left() {
	if len(t.pending) <= t.maxPending/2 {
		select {
		case t.drained <- struct{}{}:
		default:
		}
	}
}
