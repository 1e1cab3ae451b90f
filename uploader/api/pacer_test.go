package api

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// fakeClock is a manual clock: After registers a timer that fires when
// the test advances time past it. asked records every requested duration.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []fakeTimer
	asked  []time.Duration
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

// epoch is a window-aligned start time, so fake windows end on whole
// minutes like a fixed-window server's.
var epoch = time.Unix(1_700_000_040, 0)

func newFakeClock() *fakeClock { return &fakeClock{now: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	c.asked = append(c.asked, d)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	return ch
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

// awaitAsked waits (real time, hang guard only) until After was called n times.
func (c *fakeClock) awaitAsked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.askedCount() < n {
		if time.Now().After(deadline) {
			t.Fatalf("After called %d times, want %d", c.askedCount(), n)
		}
		time.Sleep(time.Millisecond)
	}
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
	c.timers = kept
}

// recorder is an Observer that keeps what the pacer reports.
type recorder struct {
	NopObserver
	mu        sync.Mutex
	remaining map[string]int
	waited    time.Duration
}

func (r *recorder) RateLimit(class string, remaining int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.remaining == nil {
		r.remaining = map[string]int{}
	}
	r.remaining[class] = remaining
}

func (r *recorder) RateLimitWait(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waited += d
}

func newTestPacer(t *testing.T, clk *fakeClock, o PacerOptions) *Pacer {
	t.Helper()
	o.Now, o.After = clk.Now, clk.After
	if o.Rand == nil {
		o.Rand = func() float64 { return 0.5 }
	}
	return NewPacer(o)
}

// windowResp builds a response with rate-limit headers; a zero reset or date
// leaves the header out.
func windowResp(status, limit, remaining int, reset, date time.Time, retryAfter string) *http.Response {
	h := http.Header{}
	if limit > 0 {
		h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	}
	if !reset.IsZero() {
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
	}
	if !date.IsZero() {
		h.Set("Date", date.UTC().Format(http.TimeFormat))
	}
	if retryAfter != "" {
		h.Set("Retry-After", retryAfter)
	}
	return &http.Response{StatusCode: status, Header: h}
}

type waitResult struct {
	release func(*http.Response)
	err     error
}

// waitAsync runs Wait in a goroutine.
func waitAsync(ctx context.Context, p *Pacer, route string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		rel, err := p.Wait(ctx, route)
		ch <- waitResult{rel, err}
	}()
	return ch
}

// awaitBlocked waits (in real time, as a hang guard only) until n
// goroutines are blocked in p.Wait.
func awaitBlocked(t *testing.T, p *Pacer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		b := p.blocked
		p.mu.Unlock()
		if b == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("blocked waiters = %d, want %d", b, n)
		}
		time.Sleep(time.Millisecond)
	}
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
		t.Fatalf("Wait returned (err=%v) while it should be held", r.err)
	default:
	}
}

func mustWait(t *testing.T, p *Pacer, route string) func(*http.Response) {
	t.Helper()
	rel, err := p.Wait(context.Background(), route)
	if err != nil {
		t.Fatalf("Wait(%s): %v", route, err)
	}
	return rel
}

func TestPacerClassNames(t *testing.T) {
	t.Parallel()
	for limit, want := range map[int]string{5: "strict", 10: "strict", 120: "normal", 240: "normal", 60: "limit_60", 1000: "limit_1000"} {
		if got := PacerClass(limit); got != want {
			t.Errorf("PacerClass(%d) = %q, want %q", limit, got, want)
		}
	}
}

func TestPacerProbeHoldsOthersUntilHeaders(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	ctx := context.Background()

	probe := mustWait(t, p, RoutePublish)
	second := waitAsync(ctx, p, RoutePublish)
	awaitBlocked(t, p, 1)
	mustNotReturn(t, second)

	now := clk.Now()
	probe(windowResp(201, 10, 9, now.Add(60*time.Second), now, ""))
	r := receive(t, second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.release(windowResp(200, 10, 8, now.Add(60*time.Second), now, ""))
	if got := p.routes[RoutePublish].bucket.class; got != "strict" {
		t.Errorf("class = %q, want strict", got)
	}
}

func TestPacerNetworkErrorPassesProbeOn(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	probe := mustWait(t, p, RouteGetSplat)
	next := waitAsync(context.Background(), p, RouteGetSplat)
	awaitBlocked(t, p, 1)
	probe(nil) // no response: the class is still unknown
	r := receive(t, next)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !p.routes[RouteGetSplat].probing {
		t.Error("the next request should be the new probe")
	}
	r.release(nil)
}

func TestPacerSpreadsRemainingBudget(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{Jitter: -1})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)

	mustWait(t, p, RouteCheckpoints)(windowResp(200, 10, 9, reset, t0, ""))
	// The first request of a known window leaves at once...
	mustWait(t, p, RouteCheckpoints)(windowResp(200, 10, 8, reset, t0, ""))
	// ...and the next waits for its share: 8 left over 60 s → 60s/9 apart.
	for i, left := range []int{8, 7, 6} {
		next := waitAsync(context.Background(), p, RouteCheckpoints)
		awaitBlocked(t, p, 1)
		mustNotReturn(t, next)
		now := clk.Now()
		want := reset.Sub(now) / time.Duration(left+1)
		if got := clk.lastAsked(); got != want {
			t.Fatalf("step %d: pacer asked to wait %v, want %v", i, got, want)
		}
		clk.Advance(want)
		r := receive(t, next)
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.release(windowResp(200, 10, left-1, reset, t0, ""))
	}
}

func TestPacerHoldsWhenNoneRemain(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	rec := &recorder{}
	p := newTestPacer(t, clk, PacerOptions{Jitter: time.Second, Observer: rec}) // Rand 0.5 → 500 ms jitter
	t0 := clk.Now()
	mustWait(t, p, RouteSignedURL)(windowResp(200, 5, 0, t0.Add(30*time.Second), t0, ""))
	if got := rec.remaining["strict"]; got != 0 {
		t.Errorf("observer remaining = %d, want 0", got)
	}

	held := waitAsync(context.Background(), p, RouteSignedURL)
	awaitBlocked(t, p, 1)
	if got, want := clk.lastAsked(), 30*time.Second+100*time.Millisecond; got != want { // a fifth of the 0.5 s jitter at a window change
		t.Fatalf("wait = %v, want %v (reset + jitter)", got, want)
	}
	clk.Advance(30 * time.Second) // not yet: the jitter is still running
	awaitBlocked(t, p, 1)
	mustNotReturn(t, held)

	clk.Advance(100 * time.Millisecond)
	first := receive(t, held)
	// The window has renewed but is unknown: this request is its probe and
	// the next one waits for the probe's headers.
	third := waitAsync(context.Background(), p, RouteSignedURL)
	awaitBlocked(t, p, 1)
	mustNotReturn(t, third)
	now := clk.Now()
	asked := clk.askedCount()
	first.release(windowResp(200, 5, 4, now.Add(60*time.Second), now, ""))
	// The probe's headers make the window known; the third request then
	// takes its even share of it: 4 left over 60.1 s → one fifth.
	clk.awaitAsked(t, asked+1)
	awaitBlocked(t, p, 1)
	share := (60*time.Second + 100*time.Millisecond) / 5
	if got := clk.lastAsked(); got != share {
		t.Fatalf("wait after the probe = %v, want %v", got, share)
	}
	clk.Advance(share)
	receive(t, third).release(nil)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.waited < 30*time.Second {
		t.Errorf("RateLimitWait total = %v, want >= 30s", rec.waited)
	}
}

func TestPacer429HoldsWholeClass(t *testing.T) {
	t.Parallel()
	httpDate := func(d time.Duration) string { return epoch.Add(d).UTC().Format(http.TimeFormat) }
	cases := []struct {
		name       string
		resetIn    time.Duration // 0: no Reset header
		retryAfter string
		want       time.Duration
	}{
		{"retry-after later than reset", 10 * time.Second, "45", 45*time.Second + 500*time.Millisecond},
		{"reset later than retry-after", 20 * time.Second, "5", 20*time.Second + 500*time.Millisecond},
		{"retry-after as HTTP date", 0, httpDate(40 * time.Second), 40*time.Second + 500*time.Millisecond},
		{"neither: short fallback", 0, "", pacer429Fallback + 500*time.Millisecond},
		{"huge retry-after is capped", 0, "86400", DefaultPacerMaxWait + 500*time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newFakeClock()
			var logs bytes.Buffer
			p := newTestPacer(t, clk, PacerOptions{Jitter: time.Second, Logger: zerolog.New(&logs)})
			t0 := clk.Now()
			var reset time.Time
			if tc.resetIn > 0 {
				reset = t0.Add(tc.resetIn)
			}
			// resp builds the case's answers; without a Reset the server
			// names only its limit, so no window is known.
			resp := func(status, remaining int, retryAfter string) *http.Response {
				r := windowResp(status, 10, remaining, reset, t0, retryAfter)
				if reset.IsZero() {
					r.Header.Del("X-RateLimit-Remaining")
				}
				return r
			}
			// Both routes learn the same class first.
			mustWait(t, p, RouteSignedURL)(resp(200, 9, ""))
			mustWait(t, p, RoutePublish)(resp(200, 8, ""))
			mustWait(t, p, RouteSignedURL)(resp(http.StatusTooManyRequests, 0, tc.retryAfter))

			// The other route of the class is held too.
			held := waitAsync(context.Background(), p, RoutePublish)
			awaitBlocked(t, p, 1)
			if got := clk.lastAsked(); got != tc.want {
				t.Fatalf("hold = %v, want %v", got, tc.want)
			}
			clk.Advance(tc.want - time.Millisecond)
			awaitBlocked(t, p, 1)
			mustNotReturn(t, held)
			clk.Advance(time.Millisecond)
			receive(t, held).release(nil)
			if !bytes.Contains(logs.Bytes(), []byte("429")) {
				t.Errorf("the hold was not logged: %s", logs.String())
			}
		})
	}
}

func TestPacerCapsFarReset(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var logs bytes.Buffer
	p := newTestPacer(t, clk, PacerOptions{Jitter: time.Second, Logger: zerolog.New(&logs)})
	t0 := clk.Now()
	mustWait(t, p, RoutePublish)(windowResp(200, 10, 0, t0.Add(time.Hour), t0, ""))
	held := waitAsync(context.Background(), p, RoutePublish)
	awaitBlocked(t, p, 1)
	if got, want := clk.lastAsked(), DefaultPacerMaxWait+100*time.Millisecond; got != want {
		t.Fatalf("wait = %v, want the cap %v", got, want)
	}
	if !bytes.Contains(logs.Bytes(), []byte("capping")) {
		t.Errorf("capped wait not logged: %s", logs.String())
	}
	clk.Advance(DefaultPacerMaxWait + 500*time.Millisecond)
	receive(t, held).release(nil)
}

func TestPacerClockSkew(t *testing.T) {
	t.Parallel()
	t.Run("server clock an hour behind", func(t *testing.T) {
		t.Parallel()
		clk := newFakeClock()
		p := newTestPacer(t, clk, PacerOptions{Jitter: -1})
		server := clk.Now().Add(-time.Hour)
		mustWait(t, p, RoutePublish)(windowResp(200, 10, 0, server.Add(30*time.Second), server, ""))
		held := waitAsync(context.Background(), p, RoutePublish)
		awaitBlocked(t, p, 1)
		if got := clk.lastAsked(); got != 30*time.Second {
			t.Fatalf("wait = %v, want 30s measured on the server's clock", got)
		}
		clk.Advance(30 * time.Second)
		receive(t, held).release(nil)
	})
	t.Run("reset already past by the server's clock", func(t *testing.T) {
		t.Parallel()
		clk := newFakeClock()
		p := newTestPacer(t, clk, PacerOptions{Jitter: -1})
		server := clk.Now().Add(10 * time.Second)
		mustWait(t, p, RoutePublish)(windowResp(200, 10, 0, server.Add(-5*time.Second), server, ""))
		// Renewed window: the next request goes at once, as its probe.
		mustWait(t, p, RoutePublish)(nil)
	})
	t.Run("no Date header: local clock", func(t *testing.T) {
		t.Parallel()
		clk := newFakeClock()
		p := newTestPacer(t, clk, PacerOptions{Jitter: -1})
		mustWait(t, p, RoutePublish)(windowResp(200, 10, 0, clk.Now().Add(20*time.Second), time.Time{}, ""))
		held := waitAsync(context.Background(), p, RoutePublish)
		awaitBlocked(t, p, 1)
		if got := clk.lastAsked(); got != 20*time.Second {
			t.Fatalf("wait = %v, want 20s", got)
		}
		clk.Advance(20 * time.Second)
		receive(t, held).release(nil)
	})
}

func TestPacerContextCancel(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	t0 := clk.Now()
	mustWait(t, p, RoutePublish)(windowResp(200, 10, 0, t0.Add(time.Minute), t0, ""))

	ctx, cancel := context.WithCancel(context.Background())
	held := waitAsync(ctx, p, RoutePublish)
	awaitBlocked(t, p, 1)
	cancel()
	r := receive(t, held)
	if !errors.Is(r.err, context.Canceled) || r.release != nil {
		t.Fatalf("Wait after cancel = (%v, release set %v), want context.Canceled", r.err, r.release != nil)
	}
	awaitBlocked(t, p, 0)

	if _, err := p.Wait(ctx, RouteGetSplat); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with a done context = %v", err)
	}
}

func TestPacerRoutesShareClassByLimit(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	t0 := clk.Now()
	mustWait(t, p, RouteSignedURL)(windowResp(200, 10, 9, t0.Add(time.Minute), t0, ""))
	mustWait(t, p, RoutePublish)(windowResp(200, 10, 8, t0.Add(time.Minute), t0, ""))
	mustWait(t, p, RouteGetSplat)(windowResp(200, 240, 239, t0.Add(time.Minute), t0, ""))
	if p.routes[RouteSignedURL].bucket != p.routes[RoutePublish].bucket {
		t.Error("routes with the same limit should share a bucket")
	}
	if p.routes[RouteGetSplat].bucket == p.routes[RoutePublish].bucket {
		t.Error("routes with different limits should not share a bucket")
	}
	if b := p.routes[RoutePublish].bucket; b.remaining != 8 {
		t.Errorf("shared remaining = %d, want 8", b.remaining)
	}
	// An older response from the same window cannot raise Remaining.
	mustWait(t, p, RouteSignedURL)(windowResp(200, 10, 9, t0.Add(time.Minute), t0, ""))
	if b := p.routes[RoutePublish].bucket; b.remaining != 8 {
		t.Errorf("remaining after a stale response = %d, want 8", b.remaining)
	}
}

func TestPacerRouteWithoutHeadersIsNotHeld(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	mustWait(t, p, RouteGetSplat)(&http.Response{StatusCode: 200, Header: http.Header{}})
	var rels []func(*http.Response)
	for range 5 {
		rels = append(rels, mustWait(t, p, RouteGetSplat)) // would block if paced
	}
	for _, r := range rels {
		r(nil)
	}
}

// simServer is a fixed-window rate limiter like the real API's: limit
// requests per window for the whole class, headers on every answer.
type simServer struct {
	mu       sync.Mutex
	clk      *fakeClock
	limit    int
	window   time.Duration
	curStart time.Time
	count    int
	ok, r429 int
}

func (s *simServer) handle() *http.Response {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clk.Now()
	for !now.Before(s.curStart.Add(s.window)) {
		s.curStart, s.count = s.curStart.Add(s.window), 0
	}
	reset := s.curStart.Add(s.window)
	date := now.Truncate(time.Second)
	if s.count >= s.limit {
		s.r429++
		return windowResp(http.StatusTooManyRequests, s.limit, 0, reset, date, strconv.Itoa(int(reset.Sub(now).Seconds())+1))
	}
	s.count++
	s.ok++
	return windowResp(200, s.limit, s.limit-s.count, reset, date, "")
}

// TestPacerConcurrentWorkersEarnNo429 drives 8 goroutines through two routes
// of one strict class against a fixed-window server on a fake clock: no 429,
// every request done, and no slower than the windows allow.
func TestPacerConcurrentWorkersEarnNo429(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	p := newTestPacer(t, clk, PacerOptions{Rand: func() float64 { mu.Lock(); defer mu.Unlock(); return rng.Float64() }})
	srv := &simServer{clk: clk, limit: 10, window: time.Minute, curStart: epoch}

	const workers, each = 8, 5
	var finished atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer finished.Add(1)
			for i := range each {
				route := RouteSignedURL
				if (w+i)%2 == 1 {
					route = RoutePublish
				}
				rel, err := p.Wait(context.Background(), route)
				if err != nil {
					t.Error(err)
					return
				}
				rel(srv.handle())
			}
		}()
	}

	// Advance the fake clock whenever every live goroutine is parked in
	// Wait (and has stayed so for a moment, so a goroutine just woken by the
	// previous advance has re-registered its timer).
	guard := time.Now().Add(30 * time.Second)
	stable := 0
	for finished.Load() < workers {
		if time.Now().After(guard) {
			t.Fatal("simulation did not finish")
		}
		p.mu.Lock()
		parked := p.blocked+int(finished.Load()) == workers
		p.mu.Unlock()
		if !parked {
			stable = 0
			time.Sleep(100 * time.Microsecond)
			continue
		}
		if stable++; stable < 3 {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		stable = 0
		if !clk.AdvanceToNext() {
			t.Fatal("all goroutines wait but no timer is pending")
		}
	}
	wg.Wait()

	if srv.r429 != 0 {
		t.Errorf("server answered 429 %d times", srv.r429)
	}
	if srv.ok != workers*each {
		t.Errorf("ok = %d, want %d", srv.ok, workers*each)
	}
	// 40 requests at 10 per minute need the 4th window, and should not need
	// a 5th.
	elapsed := clk.Now().Sub(epoch)
	if elapsed < 3*time.Minute || elapsed >= 4*time.Minute+5*time.Second {
		t.Errorf("finished after %v of fake time, want within the 4th window", elapsed)
	}
	t.Logf("40 requests at 10/min finished after %v (fake clock), 0 × 429", elapsed)
}

// TestPacerClassProbeHoldsASlotInKnownWindows: the first request of a new
// route may belong to any known class, so while it is out it takes a slot
// in each; a known route must not spend the same last slot meanwhile.
func TestPacerClassProbeHoldsASlotInKnownWindows(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	t0 := clk.Now()
	reset := t0.Add(60 * time.Second)
	mustWait(t, p, RouteSignedURL)(windowResp(200, 10, 1, reset, t0, "")) // one left in this window

	probe := mustWait(t, p, RoutePublish) // new route: a class probe
	held := waitAsync(context.Background(), p, RouteSignedURL)
	awaitBlocked(t, p, 1)
	mustNotReturn(t, held) // the last slot is the probe's

	// The probe turns out to be of the same class and spent that slot.
	probe(windowResp(200, 10, 0, reset, t0, ""))
	awaitBlocked(t, p, 1)
	mustNotReturn(t, held)
	clk.Advance(61 * time.Second)
	receive(t, held).release(nil)
}

// TestReservationCancelledCostsNothing: a slot reserved and given back
// unused (the file changed, a shutdown) does not count against the window.
func TestReservationCancelledCostsNothing(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, PacerOptions{})
	c := &Client{pacer: p}
	t0 := clk.Now()
	mustWait(t, p, RoutePublish)(windowResp(200, 10, 3, t0.Add(time.Minute), t0, ""))
	for range 2 {
		clk.Advance(20 * time.Second) // past the spreading of the remaining budget
		r, err := c.Reserve(context.Background(), RoutePublish)
		if err != nil {
			t.Fatal(err)
		}
		r.Cancel()
	}
	b := p.routes[RoutePublish].bucket
	if b.remaining != 3 || b.inFlight != 0 {
		t.Errorf("after 2 unused reservations: remaining %d, in flight %d; want 3 and 0", b.remaining, b.inFlight)
	}
}
