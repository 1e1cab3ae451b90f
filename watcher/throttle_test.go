package watcher

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// throttleHarness runs throttle over a tracker of 8 pending files, bound
// 8, on a clock the test fires: each stall timer throttle takes arrives on
// stalls.
type throttleHarness struct {
	t      *testing.T
	tr     *tracker
	stalls chan chan time.Time
	res    chan bool
}

func newThrottleHarness(t *testing.T) *throttleHarness {
	h := &throttleHarness{t: t, tr: newTracker(time.Millisecond, nil, nil), stalls: make(chan chan time.Time, 16), res: make(chan bool, 1)}
	h.tr.maxPending = 8
	h.tr.after = func(time.Duration) <-chan time.Time {
		c := make(chan time.Time, 1)
		h.stalls <- c
		return c
	}
	for i := range 8 {
		h.tr.pending[fmt.Sprint(i)] = &entry{idx: -1}
	}
	go func() { h.res <- h.tr.throttle(context.Background()) }()
	return h
}

// stall is the next stall timer throttle took.
func (h *throttleHarness) stall(why string) chan time.Time {
	h.t.Helper()
	select {
	case c := <-h.stalls:
		return c
	case <-time.After(10 * time.Second):
		h.t.Fatalf("throttle took no stall timer %s", why)
		return nil
	}
}

// leave takes file k out of the pending set, as an emission does.
func (h *throttleHarness) leave(k int) {
	h.tr.mu.Lock()
	delete(h.tr.pending, fmt.Sprint(k))
	h.tr.left()
	h.tr.mu.Unlock()
}

func (h *throttleHarness) result() bool {
	h.t.Helper()
	select {
	case ok := <-h.res:
		return ok
	case <-time.After(10 * time.Second):
		h.t.Fatal("throttle did not return")
		return false
	}
}

// TestThrottleSlowReader: files leaving the pending set one by one keep
// the scan waiting, each restarting the stall timer, until half are gone.
func TestThrottleSlowReader(t *testing.T) {
	t.Parallel()
	h := newThrottleHarness(t)
	first := h.stall("when the scan began to wait")
	for k := range 3 {
		h.leave(k)
		h.stall(fmt.Sprintf("after file %d left", k))
	}
	first <- time.Now() // the stall timer from before the files left
	h.leave(3)
	if !h.result() {
		t.Fatal("throttle gave up on a reader that was reading")
	}
}

// TestThrottleStoppedReader: with no file leaving, the stall ends the wait
// and throttle gives up.
func TestThrottleStoppedReader(t *testing.T) {
	t.Parallel()
	h := newThrottleHarness(t)
	h.stall("when the scan began to wait") <- time.Now()
	if h.result() {
		t.Fatal("throttle waited on past its stall")
	}
}
