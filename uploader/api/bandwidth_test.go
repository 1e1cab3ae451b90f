package api

import (
	"context"
	"errors"
	"io"
	"math"
	"sync"
	"testing"
	"time"
)

// bwClock is a manual clock for the limiter. Timers fire only when the test
// moves time; drive moves it to the next timer whenever every goroutine it
// started is parked on one, so a simulation runs without sleeping and its
// figures are exact arithmetic.
type bwClock struct {
	mu     sync.Mutex
	cond   *sync.Cond
	now    time.Time
	timers map[*bwTimer]struct{} // pending: neither fired nor stopped
	made   int                   // timers ever created
	live   int                   // goroutines from start that have not returned
}

type bwTimer struct {
	at time.Time
	ch chan time.Time
}

func newBWClock(now time.Time) *bwClock {
	c := &bwClock{now: now, timers: map[*bwTimer]struct{}{}}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *bwClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *bwClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &bwTimer{at: c.now.Add(d), ch: make(chan time.Time, 1)}
	c.timers[t] = struct{}{}
	c.made++
	c.cond.Broadcast()
	return t.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, pending := c.timers[t]
		delete(c.timers, t)
		c.cond.Broadcast()
		return pending
	}
}

func (c *bwClock) options() LimiterOptions {
	return LimiterOptions{Now: c.Now, NewTimer: c.NewTimer}
}

// fire fires the timers due at c.now. c.mu must be held.
func (c *bwClock) fire() {
	for t := range c.timers {
		if !t.at.After(c.now) {
			delete(c.timers, t)
			t.ch <- c.now
		}
	}
}

// advance moves the clock by d and fires what is due.
func (c *bwClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fire()
}

// bwGuard is how long, in real time, a broken limiter may keep a test
// waiting before the test fails instead of hanging. A passing test never
// waits for it: every wait below ends on an event.
const bwGuard = 20 * time.Second

// waitFor waits on c.cond until done() holds or bwGuard has passed, and
// reports done(). c.mu must be held.
func (c *bwClock) waitFor(done func() bool) bool {
	expired := false
	guard := time.AfterFunc(bwGuard, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		expired = true
		c.cond.Broadcast()
	})
	defer guard.Stop()
	for !done() && !expired {
		c.cond.Wait()
	}
	return done()
}

// awaitMade waits until n timers have been created in all.
func (c *bwClock) awaitMade(t *testing.T, n int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.waitFor(func() bool { return c.made >= n }) {
		t.Fatalf("%d timers made, want %d", c.made, n)
	}
}

// pending returns how far away each pending timer is.
func (c *bwClock) pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ds []time.Duration
	for t := range c.timers {
		ds = append(ds, t.at.Sub(c.now))
	}
	return ds
}

// start runs f on a goroutine that drive waits for.
func (c *bwClock) start(f func()) {
	c.mu.Lock()
	c.live++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.live--
			c.cond.Broadcast()
			c.mu.Unlock()
		}()
		f()
	}()
}

// drive moves the clock from timer to timer until every started goroutine
// has returned. A goroutine is parked when it has a pending timer: the
// limiter creates one only right before it blocks on it.
func (c *bwClock) drive(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.live > 0 {
		if !c.waitFor(func() bool { return c.live == 0 || len(c.timers) >= c.live }) {
			t.Fatalf("simulation stuck at %s: %d goroutines, %d parked", c.now.Format("15:04:05.000"), c.live, len(c.timers))
		}
		if c.live == 0 {
			break
		}
		var next time.Time
		for t := range c.timers {
			if next.IsZero() || t.at.Before(next) {
				next = t.at
			}
		}
		c.now = next
		c.fire()
	}
}

// bwZeros is an endless, free source.
type bwZeros struct{}

func (bwZeros) Read(p []byte) (int, error) { return len(p), nil }

// bwTimeline records the total bytes through a limiter after each read.
type bwTimeline struct {
	mu    sync.Mutex
	at    []time.Time
	total []int64
}

func (tl *bwTimeline) add(at time.Time, n int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var sum int64
	if len(tl.total) > 0 {
		sum = tl.total[len(tl.total)-1]
	}
	tl.at = append(tl.at, at)
	tl.total = append(tl.total, sum+int64(n))
}

// bytesBy returns the total of the last record at or before t.
func (tl *bwTimeline) bytesBy(t time.Time) int64 {
	var sum int64
	for i, at := range tl.at {
		if at.After(t) {
			break
		}
		sum = tl.total[i]
	}
	return sum
}

// rate is the bytes per second between from and to.
func (tl *bwTimeline) rate(from, to time.Time) float64 {
	return float64(tl.bytesBy(to)-tl.bytesBy(from)) / to.Sub(from).Seconds()
}

func bwCheckRatio(t *testing.T, what string, got, want float64) {
	t.Helper()
	if r := got / want; math.Abs(r-1) > 0.02 {
		t.Errorf("%s = %.0f B/s, want %.0f ±2%% (ratio %.4f)", what, got, want, r)
	}
}

func bwMustParse(t testing.TB, s string) Schedule {
	t.Helper()
	sched, err := ParseBandwidth(s)
	if err != nil {
		t.Fatal(err)
	}
	return sched
}

// TestLimiterAggregateRate: four streams through one limiter move at the
// limit together, second by second, and share it evenly.
func TestLimiterAggregateRate(t *testing.T) {
	t.Parallel()
	const rate, streams, each = 1 << 20, 4, 2 << 20
	t0 := bwMonday.Add(12 * time.Hour)
	clk := newBWClock(t0)
	l := NewLimiter(bwMustParse(t, "1MiB/s"), clk.options())
	var tl bwTimeline
	finished := make([]time.Time, streams)
	for i := range streams {
		clk.start(func() {
			r := l.Wrap(context.Background(), io.LimitReader(bwZeros{}, each))
			buf := make([]byte, 8<<10)
			for {
				n, err := r.Read(buf)
				tl.add(clk.Now(), n)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
			finished[i] = clk.Now()
		})
	}
	clk.drive(t)

	end := t0
	for _, f := range finished {
		if f.After(end) {
			end = f
		}
	}
	total := float64(streams * each)
	bwCheckRatio(t, "aggregate rate", total/end.Sub(t0).Seconds(), rate)
	for s := range 8 {
		from := t0.Add(time.Duration(s) * time.Second)
		bwCheckRatio(t, "rate in second "+from.Format("15:04:05"), tl.rate(from, from.Add(time.Second)), rate)
	}
	// Taking turns chunk by chunk, the streams finish together.
	for i, f := range finished {
		if d := end.Sub(f); d > end.Sub(t0)/50 {
			t.Errorf("stream %d finished %v before the last one (of %v in all)", i, d, end.Sub(t0))
		}
	}
	bwCheckRatio(t, "ObservedRate", float64(l.ObservedRate()), rate)
	if got := l.Rate(); got != rate {
		t.Errorf("Rate() = %d, want %d", got, rate)
	}
	t.Logf("%d × %d bytes at %d B/s took %v of fake time", streams, each, rate, end.Sub(t0))
}

// TestLimiterFollowsSchedule: at 19:00 the timetable raises the limit, and
// streams already waiting pick the new rate up at the boundary.
func TestLimiterFollowsSchedule(t *testing.T) {
	t.Parallel()
	const before, after = 64 << 10, 256 << 10
	t0 := bwWeekTime(0, 18, 59, 30)
	boundary := bwWeekTime(0, 19, 0, 0)
	end := bwWeekTime(0, 19, 0, 30)
	clk := newBWClock(t0)
	l := NewLimiter(bwMustParse(t, "08:00,64KiB/s 19:00,256KiB/s"), clk.options())
	if got := l.Rate(); got != before {
		t.Errorf("Rate() at 18:59:30 = %d, want %d", got, before)
	}
	var tl bwTimeline
	for range 3 {
		clk.start(func() {
			r := l.Wrap(context.Background(), bwZeros{})
			buf := make([]byte, 4<<10)
			for clk.Now().Before(end) {
				n, err := r.Read(buf)
				if err != nil {
					t.Error(err)
					return
				}
				tl.add(clk.Now(), n)
			}
		})
	}
	clk.drive(t)

	bwCheckRatio(t, "rate 18:59:30–19:00", tl.rate(t0, boundary), before)
	bwCheckRatio(t, "rate 19:00–19:00:30", tl.rate(boundary, end), after)
	bwCheckRatio(t, "rate 18:59:50–19:00", tl.rate(boundary.Add(-10*time.Second), boundary), before)
	bwCheckRatio(t, "rate 19:00–19:00:10", tl.rate(boundary, boundary.Add(10*time.Second)), after)
	if got := l.Rate(); got != after {
		t.Errorf("Rate() after 19:00 = %d, want %d", got, after)
	}
}

// TestLimiterWakesAtBoundary: a goroutine waiting when the schedule
// changes works out its wait again at the boundary, the bytes it was allowed
// before the change count, and a wake-up that comes late (a busy machine)
// credits each side of the boundary at its own rate.
func TestLimiterWakesAtBoundary(t *testing.T) {
	t.Parallel()
	boundary := bwWeekTime(0, 19, 0, 0)
	for _, tt := range []struct {
		spec string
		late time.Duration // how late the clock reaches the boundary timer
		want time.Time
	}{
		// 10 KiB allowed by 19:00, 10 KiB to go at 100 KiB/s.
		{"08:00,1KiB/s 19:00,100KiB/s", 0, boundary.Add(100 * time.Millisecond)},
		{"08:00,1KiB/s 19:00,off", 0, boundary},
		// 10 KiB by 19:00 and 10 KiB in the 100 ms after it.
		{"08:00,1KiB/s 19:00,100KiB/s", 100 * time.Millisecond, boundary.Add(100 * time.Millisecond)},
		{"08:00,1KiB/s 19:00,off", 100 * time.Millisecond, boundary.Add(100 * time.Millisecond)},
	} {
		start := boundary.Add(-10 * time.Second)
		clk := newBWClock(start)
		l := NewLimiter(bwMustParse(t, tt.spec), clk.options())
		done := bwWaitAsync(context.Background(), clk, l, 20<<10)
		if tt.late > 0 {
			clk.awaitMade(t, 1)
			clk.advance(boundary.Add(tt.late).Sub(start))
		}
		clk.drive(t)
		if r := bwRecv(t, done); r.err != nil || !r.at.Equal(tt.want) {
			t.Errorf("%s, %v late: WaitN(20 KiB) from 18:59:50 = %v at %s, want nil at %s",
				tt.spec, tt.late, r.err, r.at.Format("15:04:05.000"), tt.want.Format("15:04:05.000"))
		}
	}
}

// bwWaitResult is what a WaitN on another goroutine returned, and when.
type bwWaitResult struct {
	err error
	at  time.Time
}

func bwWaitAsync(ctx context.Context, clk *bwClock, l *Limiter, n int) <-chan bwWaitResult {
	done := make(chan bwWaitResult, 1)
	clk.start(func() {
		err := l.WaitN(ctx, n)
		done <- bwWaitResult{err, clk.Now()}
	})
	return done
}

// bwRecv receives what a goroutine under test sends, failing the test if
// it never comes.
func bwRecv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(bwGuard):
		t.Fatal("the goroutine under test is still blocked")
		panic("unreachable")
	}
}

func bwCheckPending(t *testing.T, clk *bwClock, want time.Duration) {
	t.Helper()
	if got := clk.pending(); len(got) != 1 || got[0] != want {
		t.Fatalf("pending timers %v, want one in %v", got, want)
	}
}

// TestLimiterSetScheduleWakesWaiters: a reload applies to a goroutine
// already waiting, both to a new rate and to no limit at all.
func TestLimiterSetScheduleWakesWaiters(t *testing.T) {
	t.Parallel()
	t0 := bwMonday.Add(12 * time.Hour)
	clk := newBWClock(t0)
	l := NewLimiter(bwMustParse(t, "1KiB/s"), clk.options())

	done := bwWaitAsync(context.Background(), clk, l, 10<<10)
	clk.awaitMade(t, 1)
	bwCheckPending(t, clk, 10*time.Second)
	clk.advance(2 * time.Second) // 2 KiB allowed, 8 KiB to go
	l.SetSchedule(bwMustParse(t, "4KiB/s"))
	clk.awaitMade(t, 2)
	bwCheckPending(t, clk, 2*time.Second) // 8 KiB at 4 KiB/s
	clk.advance(2 * time.Second)
	if r := bwRecv(t, done); r.err != nil || !r.at.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("WaitN = %v at %v, want nil at t0+4s", r.err, r.at.Sub(t0))
	}
	if got := l.Rate(); got != 4<<10 {
		t.Errorf("Rate() = %d, want %d", got, 4<<10)
	}

	done = bwWaitAsync(context.Background(), clk, l, 100<<10)
	clk.awaitMade(t, 3)
	l.SetSchedule(Schedule{})
	if r := bwRecv(t, done); r.err != nil || !r.at.Equal(t0.Add(4*time.Second)) {
		t.Fatalf("WaitN = %v at %v, want nil at once (t0+4s)", r.err, r.at.Sub(t0))
	}
	if got := l.Rate(); got != 0 {
		t.Errorf("Rate() = %d, want 0 (unlimited)", got)
	}

	// A stream wrapped while unlimited is limited after a reload; the
	// new limit starts with an empty bucket.
	r := l.Wrap(context.Background(), bwZeros{})
	buf := make([]byte, 1<<10)
	if n, err := r.Read(buf); n != len(buf) || err != nil {
		t.Fatalf("unlimited Read = %d, %v", n, err)
	}
	if n := len(clk.pending()); n != 0 {
		t.Fatalf("an unlimited read started %d timers", n)
	}
	l.SetSchedule(bwMustParse(t, "1KiB/s"))
	read := make(chan error, 1)
	clk.start(func() { _, err := r.Read(buf); read <- err })
	clk.awaitMade(t, 4)
	bwCheckPending(t, clk, 500*time.Millisecond) // one 512-byte chunk at 1 KiB/s
	clk.advance(500 * time.Millisecond)
	if err := bwRecv(t, read); err != nil {
		t.Fatal(err)
	}
}

// TestLimiterCancel: a canceled wait returns at once with ctx's error and
// gives back its bytes, so the next caller does not wait for them.
func TestLimiterCancel(t *testing.T) {
	t.Parallel()
	t0 := bwMonday.Add(12 * time.Hour)
	clk := newBWClock(t0)
	l := NewLimiter(bwMustParse(t, "1KiB/s"), clk.options())

	ctx, cancel := context.WithCancel(context.Background())
	done := bwWaitAsync(ctx, clk, l, 100<<10)
	clk.awaitMade(t, 1)
	bwCheckPending(t, clk, 100*time.Second)
	cancel()
	if r := bwRecv(t, done); !errors.Is(r.err, context.Canceled) || !r.at.Equal(t0) {
		t.Fatalf("WaitN = %v at t0+%v, want context.Canceled at once", r.err, r.at.Sub(t0))
	}
	if n := len(clk.pending()); n != 0 {
		t.Fatalf("%d timers left pending after the cancel", n)
	}

	done = bwWaitAsync(context.Background(), clk, l, 1<<10)
	clk.awaitMade(t, 2)
	bwCheckPending(t, clk, time.Second) // not 101 s
	clk.advance(time.Second)
	if r := bwRecv(t, done); r.err != nil {
		t.Fatal(r.err)
	}

	// A wrapped reader whose ctx is done fails its read without waiting.
	r := l.Wrap(ctx, bwZeros{})
	if n, err := r.Read(make([]byte, 1<<10)); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("Read with a canceled ctx = %d, %v; want 0, context.Canceled", n, err)
	}
	clk.mu.Lock()
	made := clk.made
	clk.mu.Unlock()
	if made != 2 {
		t.Errorf("the canceled read started a timer (%d made, want 2)", made)
	}
}

// TestLimiterBurstIsCapped: after a long idle spell the bucket holds a tenth
// of a second's worth, not an hour's.
func TestLimiterBurstIsCapped(t *testing.T) {
	t.Parallel()
	clk := newBWClock(bwMonday.Add(12 * time.Hour))
	l := NewLimiter(bwMustParse(t, "1MB/s"), clk.options())
	clk.advance(time.Hour)
	done := bwWaitAsync(context.Background(), clk, l, 1e6)
	clk.awaitMade(t, 1)
	bwCheckPending(t, clk, 900*time.Millisecond)
	clk.advance(900 * time.Millisecond)
	if r := bwRecv(t, done); r.err != nil {
		t.Fatal(r.err)
	}
}

// bwAsked is a free source that records the largest read asked of it.
type bwAsked struct {
	mu  sync.Mutex
	max int
}

func (a *bwAsked) Read(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.max = max(a.max, len(p))
	return len(p), nil
}

// TestLimiterCutsReads: a limited reader reads at most a tenth of a second's
// worth at once, and never more than 32 KiB (nor less than 512 bytes).
func TestLimiterCutsReads(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		spec string
		want int
	}{
		{"100KiB/s", 10 << 10},
		{"100MiB/s", 32 << 10},
		{"1KiB/s", 512},
		{"off", 1 << 20},
	} {
		clk := newBWClock(bwMonday.Add(12 * time.Hour))
		l := NewLimiter(bwMustParse(t, tt.spec), clk.options())
		var src bwAsked
		clk.start(func() {
			if _, err := l.Wrap(context.Background(), &src).Read(make([]byte, 1<<20)); err != nil {
				t.Error(err)
			}
		})
		clk.drive(t)
		if src.max != tt.want {
			t.Errorf("%s: Read(1 MiB) read %d bytes at once, want %d", tt.spec, src.max, tt.want)
		}
	}
}

// TestLimiterUnlimitedReadAllocatesNothing: with no limit a wrapped read is
// a plain read plus a count.
func TestLimiterUnlimitedReadAllocatesNothing(t *testing.T) {
	clk := newBWClock(bwMonday)
	l := NewLimiter(Schedule{}, clk.options())
	r := l.Wrap(context.Background(), bwZeros{})
	buf := make([]byte, 32<<10)
	if a := testing.AllocsPerRun(100, func() { _, _ = r.Read(buf) }); a != 0 {
		t.Errorf("unlimited Read allocates %v times", a)
	}
	if got := l.ObservedRate(); got != 101*32<<10 {
		// 101 reads at one instant, over the meter's one-second minimum.
		t.Errorf("ObservedRate() = %d, want %d", got, 101*32<<10)
	}
}

// BenchmarkLimiterAggregate measures, on the real clock, the aggregate rate
// of four streams through one Limiter at 20 MiB/s.
func BenchmarkLimiterAggregate(b *testing.B) {
	const rate, streams, each = 20 << 20, 4, 2 << 20
	l := NewLimiter(bwMustParse(b, "20MiB/s"), LimiterOptions{})
	var moved int64
	start := time.Now()
	for b.Loop() {
		var wg sync.WaitGroup
		for range streams {
			wg.Go(func() {
				r := l.Wrap(context.Background(), io.LimitReader(bwZeros{}, each))
				buf := make([]byte, 32<<10)
				for {
					if _, err := r.Read(buf); err != nil {
						if err != io.EOF {
							b.Error(err)
						}
						return
					}
				}
			})
		}
		wg.Wait()
		moved += streams * each
	}
	got := float64(moved) / time.Since(start).Seconds()
	b.ReportMetric(got/(1<<20), "MiB/s")
	b.ReportMetric(got/rate, "ratio")
}

// BenchmarkLimiterRead measures the cost of a 32 KiB read through a Limiter:
// none at all, unlimited (one stream and all CPUs at once), and limited far
// above the read rate, which is the cost of the bucket's bookkeeping.
func BenchmarkLimiterRead(b *testing.B) {
	read := func(b *testing.B, r io.Reader) {
		buf := make([]byte, 32<<10)
		b.SetBytes(int64(len(buf)))
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.Read(buf)
		}
	}
	b.Run("direct", func(b *testing.B) { read(b, bwZeros{}) })
	b.Run("unlimited", func(b *testing.B) {
		read(b, NewLimiter(Schedule{}, LimiterOptions{}).Wrap(context.Background(), bwZeros{}))
	})
	b.Run("unlimited-parallel", func(b *testing.B) {
		l := NewLimiter(Schedule{}, LimiterOptions{})
		b.SetBytes(32 << 10)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := l.Wrap(context.Background(), bwZeros{})
			buf := make([]byte, 32<<10)
			for pb.Next() {
				_, _ = r.Read(buf)
			}
		})
	})
	b.Run("limited-1EiB/s", func(b *testing.B) {
		read(b, NewLimiter(Schedule{rate: bwMaxRate}, LimiterOptions{}).Wrap(context.Background(), bwZeros{}))
	})
}

// TestLimiterUnlimitedRateIsWhenBytesWent: with no limit, the bytes of an
// upload that ended a while ago are not the current rate at the next look
// (they are entered in the meter when the stream ends, not when someone
// reads the rate).
func TestLimiterUnlimitedRateIsWhenBytesWent(t *testing.T) {
	t.Parallel()
	clk := newBWClock(bwMonday)
	l := NewLimiter(Schedule{}, clk.options())
	n, err := io.Copy(io.Discard, l.Wrap(context.Background(), io.LimitReader(bwZeros{}, 300<<10)))
	if err != nil || n != 300<<10 {
		t.Fatalf("copy: %d, %v", n, err)
	}
	clk.advance(time.Minute)
	if got := l.ObservedRate(); got != 0 {
		t.Errorf("a minute after a 300 KiB upload: ObservedRate() = %d, want 0", got)
	}
}
