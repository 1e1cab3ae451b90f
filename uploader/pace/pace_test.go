package pace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// The client's route names (uploader/api), and which of them only read.
const (
	routeSigned      = "signed_url"
	routePublish     = "publish"
	routeGet         = "get_splat"
	routeCheckpoints = "checkpoints"
)

func isRead(route string) bool { return route == routeGet || route == routeCheckpoints }

// fakeClock is a manual clock: Timer registers a timer that fires when the
// test advances time past it, and its stop removes it. The pacer stops the
// timer of every goroutine it wakes before waking it, so the number of
// pending timers is the number of goroutines parked in Wait. asked records
// every requested duration.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	asked  []time.Duration
	kick   chan struct{} // signalled whenever the pending timers change
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

// epoch is a window-aligned start time, so fake windows end on whole
// minutes like a fixed-window server's.
var epoch = time.Unix(1_700_000_040, 0)

func newFakeClock() *fakeClock { return &fakeClock{now: epoch, kick: make(chan struct{}, 1)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.asked = append(c.asked, d)
	if d <= 0 {
		ft.ch <- c.now
		return ft.ch, func() bool { return false }
	}
	c.timers = append(c.timers, ft)
	c.signalLocked()
	return ft.ch, func() bool { return c.stop(ft) }
}

func (c *fakeClock) stop(ft *fakeTimer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, t := range c.timers {
		if t == ft {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			c.signalLocked()
			return true
		}
	}
	return false
}

func (c *fakeClock) signalLocked() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// pending is the number of timers not yet fired or stopped: goroutines
// parked in the pacer.
func (c *fakeClock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// awaitParked waits until exactly n goroutines are parked on the clock's
// timers. Real time bounds it only as a hang guard.
func (c *fakeClock) awaitParked(t *testing.T, n int) {
	t.Helper()
	guard := time.NewTimer(10 * time.Second)
	defer guard.Stop()
	for c.pending() != n {
		select {
		case <-c.kick:
		case <-guard.C:
			t.Fatalf("parked goroutines = %d, want %d", c.pending(), n)
		}
	}
}

func (c *fakeClock) lastAsked() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.asked) == 0 {
		return -1
	}
	return c.asked[len(c.asked)-1]
}

func (c *fakeClock) askedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.asked)
}

// Advance moves time forward by d and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

// AdvanceToNext jumps to the earliest pending timer; false when none.
func (c *fakeClock) AdvanceToNext() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return false
	}
	next := c.timers[0].at
	for _, t := range c.timers {
		if t.at.Before(next) {
			next = t.at
		}
	}
	if next.After(c.now) {
		c.now = next
	}
	c.fireLocked()
	return true
}

func (c *fakeClock) fireLocked() {
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(c.now) {
			t.ch <- c.now
		} else {
			kept = append(kept, t)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
	c.signalLocked()
}

// syncBuffer is a log sink the pacer's goroutines and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) contains(sub []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Contains(b.buf.Bytes(), sub)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newTestPacer(t *testing.T, clk *fakeClock, o Options) *Pacer {
	t.Helper()
	o.Now, o.Timer = clk.Now, clk.Timer
	if o.Rand == nil {
		o.Rand = func() float64 { return 0.5 }
	}
	p := New(o)
	if o.StateFile != "" {
		// A write behind may still be under way: let it end before the
		// test's directory goes.
		t.Cleanup(func() { _ = p.Flush() })
	}
	return p
}

// windowResp builds an answer with rate-limit headers, as the API client
// reads them (whole seconds); a zero reset or date leaves the header out,
// and without a limit there is no Remaining either.
func windowResp(status, limit, remaining int, reset, date time.Time, retryAfter time.Duration) *Answer {
	a := &Answer{Status: status, Remaining: -1, RetryAfter: retryAfter}
	if limit > 0 {
		a.Limit, a.Remaining = limit, max(remaining, 0)
	}
	if !reset.IsZero() {
		a.Reset = time.Unix(reset.Unix(), 0).UTC()
	}
	if !date.IsZero() {
		a.Date = date.UTC().Truncate(time.Second)
	}
	return a
}

type waitResult struct {
	release func(*Answer)
	err     error
}

// waiter is a *Pacer or a *Caller.
type waiter interface {
	Wait(ctx context.Context, route string, read bool) (func(*Answer), error)
}

// waitAsync runs Wait in a goroutine.
func waitAsync(ctx context.Context, p waiter, route string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		rel, err := p.Wait(ctx, route, isRead(route))
		ch <- waitResult{rel, err}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
	}
	return waitResult{}
}

func mustNotReturn(t *testing.T, ch <-chan waitResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("Wait returned (err=%v) while it should be delayed", r.err)
	default:
	}
}

func mustWait(t *testing.T, p *Pacer, route string) func(*Answer) {
	t.Helper()
	rel, err := p.Wait(context.Background(), route, isRead(route))
	if err != nil {
		t.Fatalf("Wait(%s): %v", route, err)
	}
	return rel
}

// mustDelayFor checks that route's next request is delayed for exactly want
// (what names the wait in a failure), then lets it go and answers nothing.
func mustDelayFor(t *testing.T, clk *fakeClock, p *Pacer, route string, want time.Duration, what string) {
	t.Helper()
	delayed := waitAsync(context.Background(), p, route)
	clk.awaitParked(t, 1)
	if got := clk.lastAsked(); got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	clk.Advance(want)
	receive(t, delayed).release(nil)
}

func TestPacerClassNames(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int]string{5: "strict", 10: "strict", 120: "normal", 240: "normal", 60: "limit_60", 1000: "limit_1000"} {
		if got := ClassName(limit); got != want {
			t.Errorf("ClassName(%d) = %q, want %q", limit, got, want)
		}
	}
}

func TestPacerProbeHoldsOthersUntilHeaders(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	ctx := context.Background()

	probe := mustWait(t, p, routePublish)
	second := waitAsync(ctx, p, routePublish)
	clk.awaitParked(t, 1)
	mustNotReturn(t, second)

	now := clk.Now()
	probe(windowResp(201, 10, 9, now.Add(60*time.Second), now, 0))
	r := receive(t, second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.release(windowResp(200, 10, 8, now.Add(60*time.Second), now, 0))
	if got := ClassName(p.routes[routePublish].limit); got != "strict" {
		t.Errorf("class = %q, want strict", got)
	}
}

func TestPacerNetworkErrorPassesProbeOn(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	probe := mustWait(t, p, routeGet)
	next := waitAsync(context.Background(), p, routeGet)
	clk.awaitParked(t, 1)
	probe(nil) // no response: the class is still unknown
	r := receive(t, next)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !p.probes[routeGet] {
		t.Error("the next request should be the new probe")
	}
	r.release(nil)
}

// TestPacerUsesTheBudget: with no one else spending the window, every
// request Remaining allows leaves at once while many are left; the window's
// last slots (its last quarter) go one at a time, each as soon as the answer
// before it tells the count, and with none left the next waits for Reset.
func TestPacerUsesTheBudget(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)

	const limit = 240
	mustWait(t, p, routeCheckpoints)(windowResp(200, limit, limit-1, reset, t0, 0))
	// 239 left: down to the last quarter (60), they leave without waiting,
	// even before any answers.
	var rels []func(*Answer)
	for range limit - 1 - limit/4 {
		rels = append(rels, mustWait(t, p, routeCheckpoints))
	}
	if n := clk.askedCount(); n != 0 {
		t.Fatalf("the pacer waited %d times with budget left", n)
	}
	// The last quarter waits for the answers in flight: not for Reset.
	next := waitAsync(context.Background(), p, routeCheckpoints)
	clk.awaitParked(t, 1)
	for i, rel := range rels {
		mustNotReturn(t, next)
		rel(windowResp(200, limit, limit-2-i, reset, t0, 0))
	}
	rel := receive(t, next).release
	for left := limit / 4; left > 0; left-- {
		rel(windowResp(200, limit, left-1, reset, t0, 0))
		if left > 1 {
			rel = mustWait(t, p, routeCheckpoints)
		}
	}
	if clk.Now() != t0 {
		t.Fatalf("the window's last quarter took %v of fake time, want none (no one else spends it)", clk.Now().Sub(t0))
	}
	mustDelayFor(t, clk, p, routeCheckpoints, 60*time.Second, "wait with none left (until Reset)")
}

func TestPacerHoldsWhenNoneRemain(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var waitedMu sync.Mutex
	var waited []time.Duration                                                             // Options.Waited: ratelimit_wait_seconds_total
	p := newTestPacer(t, clk, Options{Jitter: time.Second, Waited: func(d time.Duration) { // Rand 0.5 → 500 ms jitter
		waitedMu.Lock()
		defer waitedMu.Unlock()
		waited = append(waited, d)
	}})
	t0 := clk.Now()
	// We spend the window ourselves (a window someone else spent would
	// make the pacer share the next one).
	mustWait(t, p, routeSigned)(windowResp(200, 5, 4, t0.Add(30*time.Second), t0, 0))
	for left := range []int{3, 2, 1, 0} {
		mustWait(t, p, routeSigned)(windowResp(200, 5, 3-left, t0.Add(30*time.Second), t0, 0))
	}
	delayed := waitAsync(context.Background(), p, routeSigned)
	clk.awaitParked(t, 1)
	if got, want := clk.lastAsked(), 30*time.Second+500*time.Millisecond; got != want {
		t.Fatalf("wait = %v, want %v (reset + jitter)", got, want)
	}
	clk.Advance(30*time.Second + 400*time.Millisecond) // not yet: the jitter is still running
	clk.awaitParked(t, 1)
	mustNotReturn(t, delayed)

	clk.Advance(100 * time.Millisecond)
	first := receive(t, delayed)
	// The window has renewed but is unknown: this request is its probe and
	// the next one waits for the probe's headers.
	third := waitAsync(context.Background(), p, routeSigned)
	clk.awaitParked(t, 1)
	mustNotReturn(t, third)
	now := clk.Now()
	first.release(windowResp(200, 5, 4, now.Add(60*time.Second), now, 0))
	// The probe's headers make the window known, with budget left.
	receive(t, third).release(nil)

	// Only the delayed requests count their wait: the window's reset, then
	// the probe's answer (no time on the fake clock).
	waitedMu.Lock()
	defer waitedMu.Unlock()
	if want := []time.Duration{30*time.Second + 500*time.Millisecond, 0}; !slices.Equal(waited, want) {
		t.Errorf("waits counted %v, want %v", waited, want)
	}
}

func TestPacer429HoldsWholeClass(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		resetIn    time.Duration // 0: no Reset header
		retryAfter time.Duration
		want       time.Duration
	}{
		{"retry-after later than reset", 10 * time.Second, 45 * time.Second, 45*time.Second + 500*time.Millisecond},
		// Back at Reset with the jitter every window change has, like the
		// token's other clients.
		{"reset later than retry-after", 20 * time.Second, 5 * time.Second, 20*time.Second + 500*time.Millisecond},
		// Retry-After is whole seconds: a server rounding its Reset up
		// (here 10 s to 11) does not make us come back a second late.
		{"retry-after is the reset rounded up", 10 * time.Second, 11 * time.Second, 10*time.Second + 500*time.Millisecond},
		{"retry-after without a window", 0, 40 * time.Second, 40*time.Second + 500*time.Millisecond},
		// Nothing known: no delay, and no backoff of the pacer's own (the
		// caller's retry rule times the retry); the window is unknown, so
		// the next request goes at once as its probe.
		{"neither: no delay", 0, 0, 0},
		{"huge retry-after is capped", 0, 24 * time.Hour, DefaultMaxWait + 500*time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock()
			var logs syncBuffer
			p := newTestPacer(t, clk, Options{Jitter: time.Second, Logger: zerolog.New(&logs)})
			t0 := clk.Now()
			var reset time.Time
			if tc.resetIn > 0 {
				reset = t0.Add(tc.resetIn)
			}
			// resp builds the case's answers; without a Reset the server
			// names only its limit, so no window is known.
			resp := func(status, remaining int, retryAfter time.Duration) *Answer {
				r := windowResp(status, 10, remaining, reset, t0, retryAfter)
				if reset.IsZero() {
					r.Remaining = -1
				}
				return r
			}
			// Both routes learn the same class first.
			mustWait(t, p, routeSigned)(resp(200, 9, 0))
			mustWait(t, p, routePublish)(resp(200, 8, 0))
			mustWait(t, p, routeSigned)(resp(429, 0, tc.retryAfter))

			if tc.want == 0 {
				mustWait(t, p, routePublish)(nil)
				if n := clk.askedCount(); n != 0 || !logs.contains([]byte("429")) {
					t.Errorf("after a 429 naming no wait: %d waits (want 0), logged %q", n, logs.String())
				}
				return
			}
			// The other route of the class is delayed too.
			delayed := waitAsync(context.Background(), p, routePublish)
			clk.awaitParked(t, 1)
			if got := clk.lastAsked(); got != tc.want {
				t.Fatalf("delay = %v, want %v", got, tc.want)
			}
			clk.Advance(tc.want - time.Millisecond)
			clk.awaitParked(t, 1)
			mustNotReturn(t, delayed)
			clk.Advance(time.Millisecond)
			receive(t, delayed).release(nil)
			if !logs.contains([]byte("429")) {
				t.Errorf("the delay was not logged: %s", logs.String())
			}
		})
	}
}

// TestPacer429HasNoBackoffOfItsOwn: consecutive 429s with the same
// Retry-After delay the class for that long each time, never longer: the
// caller's retry rule (state.Policy) is the only backoff.
func TestPacer429HasNoBackoffOfItsOwn(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	for range 3 {
		resp := windowResp(429, 10, 0, time.Time{}, clk.Now(), 30*time.Second)
		resp.Remaining = -1
		mustWait(t, p, routePublish)(resp)
		mustDelayFor(t, clk, p, routePublish, 30*time.Second, "delay after a 429 with Retry-After 30")
	}
}

func TestPacerCapsFarReset(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var logs syncBuffer
	p := newTestPacer(t, clk, Options{Jitter: time.Second, Logger: zerolog.New(&logs)})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 10, 0, t0.Add(time.Hour), t0, 0))
	// The capped delay still has a known end, which Delays shows (a worker
	// parks its job until then instead of waiting in the pacer).
	delayed := waitAsync(context.Background(), p.Caller(1, 0), routePublish)
	clk.awaitParked(t, 1)
	if d := p.Delays()[1]; !d.Until.Equal(t0.Add(DefaultMaxWait + 500*time.Millisecond)) {
		t.Errorf("the capped delay shown until %v, want the cap %v", d.Until.Sub(t0), DefaultMaxWait+500*time.Millisecond)
	}
	if got, want := clk.lastAsked(), DefaultMaxWait+500*time.Millisecond; got != want {
		t.Fatalf("wait = %v, want the cap %v", got, want)
	}
	if !logs.contains([]byte("capping")) {
		t.Errorf("capped wait not logged: %s", logs.String())
	}
	clk.Advance(DefaultMaxWait + 500*time.Millisecond)
	receive(t, delayed).release(nil)
}

func TestPacerClockSkew(t *testing.T) {
	t.Parallel()
	t.Run("server clock an hour behind", func(t *testing.T) {
		t.Parallel()
		clk := newFakeClock()
		p := newTestPacer(t, clk, Options{Jitter: -1})
		server := clk.Now().Add(-time.Hour)
		mustWait(t, p, routePublish)(windowResp(200, 10, 0, server.Add(30*time.Second), server, 0))
		delayed := waitAsync(context.Background(), p, routePublish)
		clk.awaitParked(t, 1)
		if got := clk.lastAsked(); got != 30*time.Second {
			t.Fatalf("wait = %v, want 30s measured on the server's clock", got)
		}
		clk.Advance(30 * time.Second)
		receive(t, delayed).release(nil)
	})
	t.Run("reset already past by the server's clock", func(t *testing.T) {
		t.Parallel()
		clk := newFakeClock()
		p := newTestPacer(t, clk, Options{Jitter: -1})
		server := clk.Now().Add(10 * time.Second)
		mustWait(t, p, routePublish)(windowResp(200, 10, 0, server.Add(-5*time.Second), server, 0))
		// Renewed window: the next request goes at once, as its probe.
		mustWait(t, p, routePublish)(nil)
	})
	t.Run("no Date header: local clock", func(t *testing.T) {
		t.Parallel()
		clk := newFakeClock()
		p := newTestPacer(t, clk, Options{Jitter: -1})
		mustWait(t, p, routePublish)(windowResp(200, 10, 0, clk.Now().Add(20*time.Second), time.Time{}, 0))
		delayed := waitAsync(context.Background(), p, routePublish)
		clk.awaitParked(t, 1)
		if got := clk.lastAsked(); got != 20*time.Second {
			t.Fatalf("wait = %v, want 20s", got)
		}
		clk.Advance(20 * time.Second)
		receive(t, delayed).release(nil)
	})
}

func TestPacerContextCancel(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 10, 0, t0.Add(time.Minute), t0, 0))

	ctx, cancel := context.WithCancel(context.Background())
	delayed := waitAsync(ctx, p, routePublish)
	clk.awaitParked(t, 1)
	cancel()
	r := receive(t, delayed)
	if !errors.Is(r.err, context.Canceled) || r.release != nil {
		t.Fatalf("Wait after cancel = (%v, release set %v), want context.Canceled", r.err, r.release != nil)
	}
	clk.awaitParked(t, 0)

	if _, err := p.Wait(ctx, routeGet, isRead(routeGet)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done context = %v", err)
	}
}

func TestPacerRoutesShareClassByLimit(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	t0 := clk.Now()
	mustWait(t, p, routeSigned)(windowResp(200, 10, 9, t0.Add(time.Minute), t0, 0))
	mustWait(t, p, routePublish)(windowResp(200, 10, 8, t0.Add(time.Minute), t0, 0))
	mustWait(t, p, routeGet)(windowResp(200, 240, 239, t0.Add(time.Minute), t0, 0))
	if p.routes[routeSigned] != p.routes[routePublish] {
		t.Error("routes with the same limit should share a class")
	}
	if p.routes[routeGet] == p.routes[routePublish] {
		t.Error("routes with different limits should not share a class")
	}
	if b := p.routes[routePublish]; b.remaining != 8 {
		t.Errorf("shared remaining = %d, want 8", b.remaining)
	}
	// An older response from the same window cannot raise Remaining.
	mustWait(t, p, routeSigned)(windowResp(200, 10, 9, t0.Add(time.Minute), t0, 0))
	if b := p.routes[routePublish]; b.remaining != 8 {
		t.Errorf("remaining after a stale response = %d, want 8", b.remaining)
	}
}

func TestPacerRouteWithoutHeadersIsNotDelayed(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	mustWait(t, p, routeGet)(&Answer{Status: 200, Remaining: -1})
	var rels []func(*Answer)
	for range 5 {
		rels = append(rels, mustWait(t, p, routeGet)) // would block if paced
	}
	for _, r := range rels {
		r(nil)
	}
}

// simServer is a fixed-window rate limiter like the real API's: limit
// requests per window for the whole class, windows on a fixed grid from
// epoch, headers on every answer. A neighbour on the same token spends from
// the same windows.
type simServer struct {
	mu  sync.Mutex
	clk *fakeClock
	fixedWindow
	ok, r429  int         // our requests
	inFirst   int         // ours in the window of our first request
	trace     []string    // when each request went, and whose it was (for failure reports)
	sentAt    []time.Time // each of our requests, 429s included
	nOK, n429 int         // the neighbour's
	span                  // our first request to our last
}

func newSimServer(clk *fakeClock, limit int, window time.Duration) *simServer {
	return &simServer{clk: clk, fixedWindow: fixedWindow{limit: limit, window: window, start: epoch}}
}

// fixedWindow is a server's fixed-window rate limit: windows of window back
// to back from start (the whole second of the first request when zero).
type fixedWindow struct {
	limit  int
	window time.Duration
	start  time.Time
	count  int
}

// span is the time from a test server's first request of ours to its last.
type span struct{ first, last time.Time }

func (s *span) mark(now time.Time) {
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
}

// charge counts one request at now if the window has room, and returns the
// server's answer: 200 with the count left, or 429 with Retry-After.
func (w *fixedWindow) charge(now time.Time) (resp *Answer, counted bool) {
	if w.start.IsZero() {
		w.start = now.Truncate(time.Second)
	}
	for !now.Before(w.start.Add(w.window)) {
		w.start, w.count = w.start.Add(w.window), 0
	}
	reset, date := w.start.Add(w.window), now.Truncate(time.Second)
	if w.count >= w.limit {
		return windowResp(429, w.limit, 0, reset, date, time.Duration(int(reset.Sub(now).Seconds())+1)*time.Second), false
	}
	w.count++
	return windowResp(200, w.limit, w.limit-w.count, reset, date, 0), true
}

func (s *simServer) handle() *Answer {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	s.mark(now)
	s.sentAt = append(s.sentAt, now)
	resp, counted := s.charge(now)
	if !counted {
		s.r429++
		return resp
	}
	s.ok++
	if now.Before(s.first.Truncate(s.window).Add(s.window)) {
		s.inFirst++
	}
	s.trace = append(s.trace, fmt.Sprintf("us@%v", now.Sub(epoch)))
	return resp
}

// neighbour spends one request of the current window as another client of
// the token would.
func (s *simServer) neighbour() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, counted := s.charge(s.clk.Now()); !counted {
		s.n429++
		return
	}
	s.nOK++
	s.trace = append(s.trace, fmt.Sprintf("n@%v", s.clk.Now().Sub(epoch)))
}

// drive runs fn(0..n-1) in n goroutines to completion on clk: whenever every
// goroutine still running is parked on one of the clock's timers, time jumps
// to the next timer. The pacer stops a timer before it wakes its goroutine,
// so "parked" is exact: no sleep, no settling delay. Real time bounds the run
// only as a hang guard.
func drive(tb testing.TB, clk *fakeClock, n int, fn func(i int)) {
	tb.Helper()
	var live atomic.Int32
	live.Store(int32(n))
	for i := range n {
		go func() {
			defer func() {
				live.Add(-1)
				clk.mu.Lock()
				clk.signalLocked()
				clk.mu.Unlock()
			}()
			fn(i)
		}()
	}
	guard := time.NewTimer(60 * time.Second)
	defer guard.Stop()
	for {
		l := int(live.Load())
		if l == 0 {
			return
		}
		if clk.pending() == l {
			if !clk.AdvanceToNext() {
				tb.Fatal("every goroutine waits but no timer is pending")
			}
			continue
		}
		select {
		case <-clk.kick:
		case <-guard.C:
			tb.Fatalf("simulation did not finish: %d goroutines live, %d parked", live.Load(), clk.pending())
		}
	}
}

// sleepFake parks the calling goroutine on clk until at.
func sleepFake(clk *fakeClock, at time.Time) {
	if d := at.Sub(clk.Now()); d > 0 {
		c, _ := clk.Timer(d)
		<-c
	}
}

// publishFiles runs the daemon's API traffic for files files on workers
// goroutines: a signed URL and a publish per file, both in srv's class.
func publishFiles(tb testing.TB, p *Pacer, srv *simServer, workers, files int) func(int) {
	var next atomic.Int32
	return func(int) {
		for next.Add(1) <= int32(files) {
			for _, route := range []string{routeSigned, routePublish} {
				rel, err := p.Wait(context.Background(), route, isRead(route))
				if err != nil {
					tb.Error(err)
					return
				}
				rel(srv.handle())
			}
		}
	}
}

// seededRand is a goroutine-safe Rand for the pacer.
func seededRand(seed uint64) func() float64 {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, seed+1))
	return func() float64 { mu.Lock(); defer mu.Unlock(); return rng.Float64() }
}

// pacingRun publishes files files with workers workers under limit per
// window and returns the server (its counts) and the ratio of the time from
// the first request to the last answer over the minimum the limit allows:
// (ceil(requests/limit) - 1) windows, the last window's requests all going
// at its start.
func pacingRun(tb testing.TB, files, workers, limit int, window time.Duration, seed uint64) (*simServer, float64) {
	clk := newFakeClock()
	p := New(Options{Now: clk.Now, Timer: clk.Timer, Rand: seededRand(seed)})
	srv := newSimServer(clk, limit, window)
	drive(tb, clk, workers, publishFiles(tb, p, srv, workers, files))
	need := 2 * files
	minimum := time.Duration((need+limit-1)/limit-1) * window
	return srv, srv.last.Sub(srv.first).Seconds() / minimum.Seconds()
}

// TestPacerConcurrentWorkersEarnNo429 drives 8 goroutines through two routes
// of one strict class against a fixed-window server on a fake clock: no 429,
// every request done, and no slower than the windows allow.
func TestPacerConcurrentWorkersEarnNo429(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Rand: seededRand(1)})
	srv := newSimServer(clk, 10, time.Minute)

	const workers, each = 8, 5
	drive(t, clk, workers, func(w int) {
		for i := range each {
			route := routeSigned
			if (w+i)%2 == 1 {
				route = routePublish
			}
			rel, err := p.Wait(context.Background(), route, isRead(route))
			if err != nil {
				t.Error(err)
				return
			}
			rel(srv.handle())
		}
	})

	if srv.r429 != 0 {
		t.Errorf("server answered 429 %d times", srv.r429)
	}
	if srv.ok != workers*each {
		t.Errorf("ok = %d, want %d", srv.ok, workers*each)
	}
	// 40 requests at 10 per minute need the 4th window, and should not need
	// a 5th.
	elapsed := clk.Now().Sub(epoch)
	if elapsed < 3*time.Minute || elapsed >= 4*time.Minute {
		t.Errorf("finished after %v of fake time, want within the 4th window", elapsed)
	}
	t.Logf("40 requests at 10/min finished after %v (fake clock), 0 × 429", elapsed)
	if t.Failed() {
		t.Logf("requests: %v", srv.trace)
	}
}

// TestPacerBatchAtTheLimit: a backlog drains as fast as the limit allows
// (issue 12: 20 files under 5 per 10 s took 1.32 × the minimum when the
// pacer spread each window's budget).
func TestPacerBatchAtTheLimit(t *testing.T) {
	t.Parallel()
	for _, files := range []int{20, 30} {
		srv, ratio := pacingRun(t, files, 2, 5, 10*time.Second, uint64(files))
		if srv.r429 != 0 || srv.ok != 2*files {
			t.Errorf("%d files: %d ok, %d × 429; want %d and 0", files, srv.ok, srv.r429, 2*files)
		}
		if ratio > 1.1 {
			t.Errorf("%d files: %.3f × the minimum, want <= 1.1", files, ratio)
		}
		t.Logf("%d files under 5 per 10 s: %.3f × the minimum, %d × 429", files, ratio, srv.r429)
	}
}

// neighbourRun publishes files files (2 workers) while a neighbour on the
// same token spends half of every window, at the moments at(window start)
// gives, from the window before ours until horizon windows have passed.
func neighbourRun(tb testing.TB, files int, at func(start time.Time) []time.Time, horizon int) (*simServer, *Pacer) {
	clk := newFakeClock()
	p := New(Options{Now: clk.Now, Timer: clk.Timer, Rand: seededRand(7)})
	srv := newSimServer(clk, 10, time.Minute)
	work := publishFiles(tb, p, srv, 2, files)
	drive(tb, clk, 3, func(i int) {
		if i < 2 {
			// We start late in the neighbour's first window, after it
			// spent there: a neighbour whose requests never got counted
			// (we took the window first) is invisible.
			sleepFake(clk, epoch.Add(55*time.Second))
			work(i)
			return
		}
		for w := range horizon {
			for _, t := range at(epoch.Add(time.Duration(w) * time.Minute)) {
				sleepFake(clk, t)
				srv.neighbour()
			}
		}
	})
	return srv, p
}

// TestPacerSharesWithANeighbour: another client of the token spends half of
// every window. The pacer sees Remaining fall faster than its own requests
// explain and leaves the neighbour its half: we draw no 429, the neighbour
// loses nothing to us, and we still get most of the other half.
func TestPacerSharesWithANeighbour(t *testing.T) {
	t.Parallel()
	const files, horizon = 15, 12 // 30 requests: 6 windows at our half of 10 per minute
	patterns := map[string]func(time.Time) []time.Time{
		"burst at the window's start": func(s time.Time) []time.Time {
			return []time.Time{s, s, s, s, s}
		},
		"spread over the window": func(s time.Time) []time.Time {
			var ts []time.Time
			for k := range 5 {
				ts = append(ts, s.Add(time.Duration(6+12*k)*time.Second))
			}
			return ts
		},
		"burst late in the window": func(s time.Time) []time.Time {
			t := s.Add(50 * time.Second)
			return []time.Time{t, t, t, t, t}
		},
	}
	for name, at := range patterns {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv, _ := neighbourRun(t, files, at, horizon)
			if srv.r429 != 0 {
				t.Errorf("we drew %d × 429", srv.r429)
			}
			if srv.ok != 2*files {
				t.Fatalf("we got %d requests through, want %d", srv.ok, 2*files)
			}
			// Not starved: at least 4 of the neighbour's spare 5 per window
			// (the pacer keeps the last slot of a shared window), after the
			// window we start in.
			first := srv.first.Truncate(time.Minute).Add(time.Minute)
			windows := math.Ceil(srv.last.Sub(first).Minutes())
			if per := float64(srv.ok-srv.inFirst) / windows; per < 4 {
				t.Errorf("we got %.1f requests per window (%v windows), want >= 4", per, windows)
			}
			t.Logf("%s: %d requests in %v windows after the first beside the neighbour; we drew %d × 429, the neighbour %d (it spent %d)",
				name, srv.ok, windows, srv.r429, srv.n429, srv.nOK)
			if srv.n429 > 0 {
				t.Errorf("the neighbour drew %d × 429: we took its half", srv.n429)
			}
			if t.Failed() {
				t.Logf("requests: %v", srv.trace)
			}
		})
	}
}

// TestPacerNeighbourSeenFromTheFirstAnswer: the unexplained use is counted
// from Remaining against our own requests, in flight or answered.
func TestPacerNeighbourSeenFromTheFirstAnswer(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)
	// Alone: 3 of ours out, answers in any order, no one else.
	mustWait(t, p, routePublish)(windowResp(200, 100, 99, reset, t0, 0))
	a, b := mustWait(t, p, routePublish), mustWait(t, p, routePublish)
	b(windowResp(200, 100, 97, reset, t0, 0))
	a(windowResp(200, 100, 98, reset, t0, 0))
	bk := p.routes[routePublish]
	if bk.own != 3 || bk.others != 0 {
		t.Fatalf("alone: own %d others %d, want 3 and 0", bk.own, bk.others)
	}
	// Two more went to someone else before our next answer.
	mustWait(t, p, routePublish)(windowResp(200, 100, 94, reset, t0, 0))
	if bk.own != 4 || bk.others != 2 {
		t.Fatalf("shared: own %d others %d, want 4 and 2", bk.own, bk.others)
	}
	// Now we share: 94 left, the neighbour expected to spend as much again
	// as it has (2 more): 92 more are ours, at once (our count includes
	// everyone's but a round trip's), then none until Reset.
	for range 92 {
		mustWait(t, p, routePublish)(nil)
	}
	if n := clk.askedCount(); n != 0 {
		t.Fatalf("the pacer waited %d times within our share", n)
	}
	mustDelayFor(t, clk, p, routePublish, 60*time.Second, "wait after our share (until Reset)")
}

// TestPacerClassProbeHoldsASlotInKnownWindows: the first request of a new
// route may belong to any known class, so while it is out it takes a slot
// in each; a known route must not spend the same last slot meanwhile.
func TestPacerClassProbeHoldsASlotInKnownWindows(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)
	mustWait(t, p, routeSigned)(windowResp(200, 10, 1, reset, t0, 0)) // one left in this window

	probe := mustWait(t, p, routePublish) // new route: a class probe
	delayed := waitAsync(context.Background(), p, routeSigned)
	clk.awaitParked(t, 1)
	mustNotReturn(t, delayed) // the last slot is the probe's

	// The probe turns out to be of the same class and spent that slot.
	probe(windowResp(200, 10, 0, reset, t0, 0))
	clk.awaitParked(t, 1)
	mustNotReturn(t, delayed)
	clk.Advance(61 * time.Second)
	receive(t, delayed).release(nil)
}

// TestPacerReadRouteProbeSkipsAStrictWindow: a batch's last publishes spend
// the strict window; the first poll (a read route, class unknown) does not
// wait it out, since no read route is known to be strict, and it is not
// counted in that window. A write route's first request still is delayed, and
// so is a read route's once a read route is known to be in the class.
func TestPacerReadRouteProbeSkipsAStrictWindow(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)
	mustWait(t, p, routePublish)(windowResp(200, 10, 0, reset, t0, 0)) // strict, spent

	poll := receive(t, waitAsync(context.Background(), p, routeGet))
	if b := p.routes[routePublish]; b.inFlight != 0 {
		t.Errorf("the read probe was counted in the strict window (in flight %d)", b.inFlight)
	}
	poll.release(windowResp(200, 240, 239, reset, t0, 0))
	if got := ClassName(p.routes[routeGet].limit); got != "normal" {
		t.Fatalf("get_splat class = %q, want normal", got)
	}
	mustDelayFor(t, clk, p, routeSigned, 60*time.Second+500*time.Millisecond/5,
		"a write route's first request while the strict window is spent (until Reset)")

	// A second pacer where a read route is known to be strict: the first
	// request of another read route waits for the strict window too.
	clk2 := newFakeClock()
	q := newTestPacer(t, clk2, Options{})
	t1 := clk2.Now()
	mustWait(t, q, routeCheckpoints)(windowResp(200, 10, 0, t1.Add(60*time.Second), t1, 0))
	mustDelayFor(t, clk2, q, routeGet, 60*time.Second+500*time.Millisecond/5,
		"a read route's first request while a class holding a read route is spent (until Reset)")
}

// TestPacerWithoutStateFileWritesNothing: a pacer kept in memory (a
// one-shot command's) learns classes and spends windows without trying to
// write a state file, so it logs no failed write.
func TestPacerWithoutStateFileWritesNothing(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var logs syncBuffer
	p := newTestPacer(t, clk, Options{Logger: zerolog.New(&logs)})
	t0 := clk.Now()
	mustWait(t, p, routeGet)(windowResp(200, 240, 239, t0.Add(time.Minute), t0, 0))  // names a class
	mustWait(t, p, routePublish)(windowResp(200, 10, 0, t0.Add(time.Minute), t0, 0)) // spends one
	if err := p.Flush(); err != nil {
		t.Errorf("Flush without a state file: %v", err)
	}
	if logs.contains([]byte("rate-limit state")) {
		t.Errorf("logged a state file it does not have: %s", logs.String())
	}
}

// TestPacerNotSentCostsNothing: a slot admitted and given back unused (a
// reservation cancelled: the file changed, a shutdown) does not count
// against the window.
func TestPacerNotSentCostsNothing(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 240, 239, t0.Add(time.Minute), t0, 0))
	for range 2 {
		mustWait(t, p, routePublish)(NotSent)
	}
	b := p.routes[routePublish]
	if b.remaining != 239 || b.inFlight != 0 || b.own != 1 {
		t.Errorf("after 2 unused slots: remaining %d, in flight %d, own %d; want 239, 0 and 1", b.remaining, b.inFlight, b.own)
	}
}

// TestPacerResetThroughTheLeastDateLag: Date is whole seconds, so an answer
// late in a second overstates how far Reset is; the smallest lag seen
// places it (within the answers' travel).
func TestPacerResetThroughTheLeastDateLag(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	clk.Advance(100 * time.Millisecond) // an answer early in second t0
	mustWait(t, p, routePublish)(windowResp(200, 100, 99, t0.Add(10*time.Second), t0, 0))
	clk.Advance(10*time.Second + 800*time.Millisecond) // the next window, late in second t0+10
	mustWait(t, p, routePublish)(windowResp(200, 100, 0, t0.Add(20*time.Second), t0.Add(10*time.Second), 0))
	// Reset t0+20 is 9.1 s away from now (t0+10.9), plus the first
	// answer's 0.1 s lag: 9.2 s, not the 10 s that now - Date would say.
	mustDelayFor(t, clk, p, routePublish, 9200*time.Millisecond, "wait for Reset")
}

// TestPacerShareMemory: the others' expected use per window follows what
// they spent when we looked as late as they first showed; when we did not,
// it is kept, for ten quiet windows, and then halves. (quiet 0: this window
// we looked as late as they first showed; observe sets it from an answer's
// lead against late.)
func TestPacerShareMemory(t *testing.T) {
	t.Parallel()
	c := &class{limit: 10, share: share{others: 5, late: 5 * time.Second, quiet: 1}}
	c.end(c.limit) // we did not look as late as they showed
	if c.expect != 5 {
		t.Fatalf("expect after a window with others = %d, want 5", c.expect)
	}
	for w := 1; w <= 10; w++ {
		c.end(c.limit)
		if c.expect != 5 {
			t.Fatalf("quiet window %d, looked early: expect %d, want 5 kept", w, c.expect)
		}
	}
	c.end(c.limit)
	if c.expect != 2 {
		t.Errorf("the 11th quiet window: expect %d, want 2 (halved)", c.expect)
	}
	c.expect, c.quiet = 4, 1
	c.end(c.limit) // a quiet window seen early, the count of quiet windows restarted
	if c.expect != 4 {
		t.Errorf("a quiet window after one with others, looked early: expect %d, want 4 kept", c.expect)
	}
	c.quiet = 0
	c.end(c.limit) // we looked as late as they first showed, and none came
	if c.expect != 2 {
		t.Errorf("a window seen late enough without others: expect %d, want 2 (halved)", c.expect)
	}
	// The answers set quiet: one as late as late (within the jitter) marks
	// the window seen, an earlier one does not.
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 10, 9, t0.Add(60*time.Second), t0, 0))
	k := p.routes[routePublish]
	k.late = 20 * time.Second
	clk.Advance(30 * time.Second)
	mustWait(t, p, routePublish)(windowResp(200, 10, 8, t0.Add(60*time.Second), t0.Add(30*time.Second), 0))
	if k.quiet == 0 {
		t.Errorf("an answer 30 s before Reset marked the window seen (they showed 20 s before it)")
	}
	clk.Advance(15 * time.Second)
	mustWait(t, p, routePublish)(windowResp(200, 10, 7, t0.Add(60*time.Second), t0.Add(45*time.Second), 0))
	if k.quiet != 0 {
		t.Errorf("an answer 15 s before Reset did not mark the window seen (they showed 20 s before it)")
	}
}

// TestPacerReserveInALargeClass: the rules that end a fleet's backlog
// together, on the share kept for the others (package doc): in a class of
// more than 10 per window, a daemon below its fair share of the window
// (limit / (peers + 1)) takes a slot of the others' share while more than
// one is left; past it, it keeps for them no more than their share of what
// is left (peers / (peers + 1) of it). A strict class of 5 keeps the whole
// share.
func TestPacerReserveInALargeClass(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		c    class
		want int
	}{
		{"below the fair share of 12/(2+1)", class{limit: 12, remaining: 10, own: 2, share: share{expect: 10, peers: 2}}, 9},
		{"at the fair share: a third of what is left is ours", class{limit: 12, remaining: 8, own: 4, share: share{expect: 10, peers: 2}}, 6},
		{"the same, one of ours in flight", class{limit: 12, remaining: 8, own: 3, inFlight: 1, share: share{expect: 10, peers: 2}}, 5},
		{"past it, as many left as peers plus one", class{limit: 12, remaining: 3, own: 6, share: share{expect: 10, peers: 2}}, 2},
		{"past it, as many left as peers", class{limit: 12, remaining: 2, own: 6, share: share{expect: 10, peers: 2}}, 2},
		{"below it, one slot left", class{limit: 12, remaining: 1, own: 2, share: share{expect: 10, peers: 2}}, 1},
		{"no peers seen: no fair share", class{limit: 12, remaining: 10, own: 2, share: share{expect: 10}}, 10},
		{"a strict class of 5: below the share", class{limit: 5, remaining: 4, own: 1, share: share{expect: 3, peers: 1}}, 3},
	}
	for _, tc := range cases {
		if got := tc.c.keep(tc.c.limit, tc.c.remaining-tc.c.inFlight, tc.c.own+tc.c.inFlight, 0); got != tc.want {
			t.Errorf("%s: reserve %d, want %d", tc.name, got, tc.want)
		}
	}
	// The fair share over the clients a fleet says have work left, not over
	// peers + 1: peers counts their requests between two answers of ours.
	burst := share{expect: 8, peers: 8}
	for _, tc := range []struct {
		name    string
		clients int
		want    int
	}{
		{"9 clients from peers: past the fair share of 12/9", 0, 6},
		{"3 clients with work: below the fair share of 12/3", 3, 5},
		{"only this one has work left: every slot but one", 1, 5},
	} {
		if got := burst.keep(12, 6, 2, tc.clients); got != tc.want {
			t.Errorf("%s: reserve %d, want %d", tc.name, got, tc.want)
		}
	}
	// Alone in the fleet while others spend this window: a client the fleet
	// does not know keeps the fair share of two (past 12/2: 6 of 6 left).
	neighbour := share{expect: 8, peers: 8, others: 2}
	if got := neighbour.keep(12, 6, 6, 1); got != 6 {
		t.Errorf("alone in the fleet beside another client: reserve %d, want 6", got)
	}
}

// TestPacerClassesCountDelayedRequests: the status page's "waiting" is the
// requests the pacer delays (two callers parked while a strict
// window's count is in flight), and apart from them the ones in flight; it showed the ones in flight only, so
// a pacing daemon read 0 waiting.
func TestPacerClassesCountDelayedRequests(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)
	mustWait(t, p, routePublish)(windowResp(200, 10, 9, reset, t0, 0))
	out := mustWait(t, p, routePublish) // in flight: the next wait for its count
	ctx, cancel := context.WithCancel(context.Background())
	a := waitAsync(ctx, p, routePublish)
	b := waitAsync(ctx, p, routePublish)
	clk.awaitParked(t, 2)
	cs := p.Classes()
	if len(cs) != 1 || cs[0].Waiting != 2 || inFlight(p, 10) != 1 {
		t.Errorf("classes %+v, %d in flight; want 2 waiting and 1 in flight", cs, inFlight(p, 10))
	}
	cancel()
	for _, ch := range []<-chan waitResult{a, b} {
		if r := receive(t, ch); r.err == nil {
			r.release(NotSent)
		}
	}
	out(windowResp(200, 10, 8, reset, t0, 0))
	if cs := p.Classes(); cs[0].Waiting != 0 || inFlight(p, 10) != 0 {
		t.Errorf("after the callers gave up: %+v, %d in flight; want none waiting or in flight", cs[0], inFlight(p, 10))
	}
}

// TestPacerShowsItsDelays: a Caller's delayed request shows in Delays, by
// its key, with why, in which class and until when (what `splatd jobs`
// shows of a job waiting on the rate limit), and no longer once it leaves.
func TestPacerShowsItsDelays(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 10, 0, t0.Add(30*time.Second), t0, 0)) // spent

	c := p.Caller(7, 0)
	delayed := waitAsync(context.Background(), c, routePublish)
	clk.awaitParked(t, 1)
	if d := p.Delays()[7]; d.Class != "strict" || d.Reason != "no request left in the window" || !d.Until.Equal(t0.Add(30*time.Second)) {
		t.Errorf("shown while delayed: %+v, want a strict delay until the Reset", d)
	}
	clk.Advance(30 * time.Second)
	receive(t, delayed).release(nil)
	if d := p.Delays(); len(d) != 0 {
		t.Errorf("shown after the request left: %+v, want none", d)
	}
	rel, err := c.Wait(context.Background(), routeGet, true) // a poll, not delayed
	if err != nil {
		t.Fatal(err)
	}
	rel(nil)
	if d := p.Delays(); len(d) != 0 {
		t.Errorf("a request let through at once shows %+v", d)
	}

	// A route that sends no rate-limit headers is in no class: a 429's
	// Retry-After delays it under "unknown", not under a class named by
	// limit 0.
	rel, err = c.Wait(context.Background(), routeSigned, false)
	if err != nil {
		t.Fatal(err)
	}
	rel(&Answer{Status: 429, Remaining: -1, RetryAfter: 5 * time.Second})
	delayed = waitAsync(context.Background(), c, routeSigned)
	clk.awaitParked(t, 1)
	if d := p.Delays()[7]; d.Class != "unknown" || !d.Until.Equal(clk.Now().Add(5*time.Second)) {
		t.Errorf("a delayed route without headers shows %+v, want class unknown until the Retry-After", d)
	}
	clk.Advance(5 * time.Second)
	receive(t, delayed).release(nil)
	if d := p.Delays(); len(d) != 0 {
		t.Errorf("shown after the request left: %+v, want none", d)
	}
}
