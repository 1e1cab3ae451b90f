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
// half of them are gone or ctx ends. It gives up when no file leaves the
// pending set for twice the settle time plus a second (files held by
// min_age, or a reader that stopped reading candidates): a reader that is
// slow but reading keeps the scan waiting, however long half of them take.
// It returns false once it gave up: the rest of the scan then goes on
// unthrottled.
func (t *tracker) throttle(ctx context.Context) bool {
	t.mu.Lock()
	n := len(t.pending)
	t.mu.Unlock()
	if n < t.maxPending {
		return true
	}
	stallAfter := 2*t.settle + time.Second
	stall := t.after(stallAfter)
	for {
		select {
		case <-ctx.Done():
			return true
		case <-stall:
			return false
		case <-t.drained:
		}
		t.mu.Lock()
		n = len(t.pending)
		t.mu.Unlock()
		if n <= t.maxPending/2 {
			return true
		}
		stall = t.after(stallAfter) // a file left: the reader reads
	}
}

// left tells a waiting scan that a file left the pending set; t.mu is held.
func (t *tracker) left() {
	select {
	case t.drained <- struct{}{}:
	default:
	}
}
