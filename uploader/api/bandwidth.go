package api

import (
	"context"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The limiter is one token bucket for every byte the daemon uploads, so the
// limit is the aggregate rate on the uplink; its model (granted and
// credited totals, bursts, chunks) is in docs/architecture.md, "Bandwidth
// limit".

const (
	// bwChunkMax and bwChunkMin bound a wrapped reader's chunk.
	bwChunkMax = 32 << 10
	bwChunkMin = 512
	// bwMeterSeconds is the span of ObservedRate.
	bwMeterSeconds = 5
	// bwMeterBatch is how many unlimited bytes are counted before they are
	// stamped with the time and entered in the meter.
	bwMeterBatch = 1 << 20
	// bwEpsilon absorbs float rounding when credited reaches a target.
	bwEpsilon = 1e-3
)

// LimiterOptions configures a Limiter. Every field is optional; the clock
// fields exist so tests can drive the limiter without sleeping.
type LimiterOptions struct {
	Now func() time.Time // default time.Now
	// NewTimer returns a channel that receives once d has passed and a
	// function that stops the timer; default time.NewTimer.
	NewTimer func(d time.Duration) (<-chan time.Time, func() bool)
}

// Limiter limits the aggregate upload rate of every stream it wraps to a
// Schedule. It is safe for concurrent use; the daemon shares one.
type Limiter struct {
	now      func() time.Time
	newTimer func(time.Duration) (<-chan time.Time, func() bool)

	unlimited atomic.Bool  // the schedule never limits: readers pass through
	rate      atomic.Int64 // the limit as of the last update, for chunk sizes
	unmetered atomic.Int64 // unlimited bytes not yet entered in the meter

	mu       sync.Mutex
	sched    Schedule
	last     time.Time // credited is integrated up to here
	credited float64
	granted  float64
	changed  chan struct{} // closed and replaced by SetSchedule
	meter    bwMeter
}

// NewLimiter returns a Limiter that follows s.
func NewLimiter(s Schedule, o LimiterOptions) *Limiter {
	l := &Limiter{now: o.Now, newTimer: o.NewTimer, changed: make(chan struct{})}
	if l.now == nil {
		l.now = time.Now
	}
	if l.newTimer == nil {
		l.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	now := l.now()
	l.last = now
	l.meter.start = now
	l.sched = s
	l.unlimited.Store(s.Unlimited())
	l.rate.Store(s.At(now))
	return l
}

// SetSchedule replaces the schedule, for a config reload. Bytes already
// allowed stay allowed; goroutines waiting in WaitN or in a wrapped reader's
// Read recompute their wait under the new schedule at once.
func (l *Limiter) SetSchedule(s Schedule) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.flushMeter(now)
	l.advance(now) // under the old schedule up to now
	l.sched = s
	l.unlimited.Store(s.Unlimited())
	l.settle(now)
	close(l.changed)
	l.changed = make(chan struct{})
}

// Schedule returns the schedule in force.
func (l *Limiter) Schedule() Schedule {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sched
}

// Rate returns the current limit in bytes per second; 0 means unlimited.
func (l *Limiter) Rate() int64 {
	return l.Schedule().At(l.now())
}

// ObservedRate returns the bytes per second that went through the limiter
// over the last five seconds, for a status page.
func (l *Limiter) ObservedRate() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.flushMeter(now)
	return l.meter.rate(now)
}

// WaitN blocks until n more bytes may be sent, or until ctx is done; then it
// returns ctx's error and gives back what it had not yet been allowed. Any n
// is fine, but a large one is a burst: streams should go through Wrap.
func (l *Limiter) WaitN(ctx context.Context, n int) error {
	if n <= 0 {
		return nil
	}
	if l.unlimited.Load() {
		l.count(n)
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.advance(now)
	l.granted += float64(n)
	target := l.granted
	for {
		if l.credited >= target-bwEpsilon {
			l.meter.add(now, int64(n))
			return nil
		}
		if err := ctx.Err(); err != nil {
			// Hand back the unpaid part, so that those queued behind do
			// not wait for bytes that will never be sent.
			l.credited += math.Min(float64(n), target-l.credited)
			return err
		}
		// settle has cleared any debt while unlimited, so the rate is set.
		rate := float64(l.sched.At(now))
		// Capped, so that a huge debt at a tiny rate cannot overflow a
		// Duration; a capped waiter just looks again.
		d := time.Duration(math.Ceil(min((target-l.credited)/rate, 3600) * 1e9))
		if next, ok := l.sched.next(now); ok && next.Sub(now) < d {
			d = next.Sub(now) // the rate changes first: look again then
		}
		changed := l.changed
		l.mu.Unlock()
		c, stop := l.newTimer(d)
		select {
		case <-c:
		case <-changed:
		case <-ctx.Done():
		}
		stop()
		l.mu.Lock()
		now = l.now()
		l.advance(now)
	}
}

// count records n bytes that passed while the schedule never limits.
func (l *Limiter) count(n int) {
	if l.unmetered.Add(int64(n)) >= bwMeterBatch {
		l.mu.Lock()
		l.flushMeter(l.now())
		l.mu.Unlock()
	}
}

// flushMeter enters the unlimited bytes counted so far in the meter at now.
// l.mu must be held.
func (l *Limiter) flushMeter(now time.Time) {
	if n := l.unmetered.Swap(0); n > 0 {
		l.meter.add(now, n)
	}
}

// advance integrates the schedule's rate from l.last to now into credited.
// l.mu must be held.
func (l *Limiter) advance(now time.Time) {
	for now.After(l.last) {
		rate := l.sched.At(l.last)
		end := now
		if next, ok := l.sched.next(l.last); ok && next.Before(now) && next.After(l.last) {
			end = next
		}
		if rate == 0 {
			l.credited = math.Max(l.credited, l.granted)
		} else {
			l.credited += end.Sub(l.last).Seconds() * float64(rate)
			if l.credited >= l.granted+bwBurst(rate) {
				// A full bucket: what came before no longer matters, so
				// skip the rest of a long idle stretch in one step.
				l.last = now
				l.credited = l.granted + bwBurst(l.sched.At(now))
				break
			}
		}
		l.last = end
	}
	l.settle(now)
}

// settle brings the bucket in line with the rate at now. l.mu must be held.
func (l *Limiter) settle(now time.Time) {
	rate := l.sched.At(now)
	l.rate.Store(rate)
	if rate == 0 {
		l.credited = math.Max(l.credited, l.granted)
	} else {
		l.credited = math.Min(l.credited, l.granted+bwBurst(rate))
	}
}

// bwBurst is the most an idle bucket holds at rate: a tenth of a second's
// worth, and at least one chunk.
func bwBurst(rate int64) float64 {
	if rate == 0 {
		return 0
	}
	return float64(max(rate/10, bwChunkMin))
}

// chunk is the largest read a limited reader makes at once.
func (l *Limiter) chunk() int {
	rate := l.rate.Load()
	if rate == 0 {
		return bwChunkMax
	}
	return int(min(max(rate/10, bwChunkMin), bwChunkMax))
}

// Wrap returns a reader that reads r through the limiter: each read is at
// most one chunk, and returns only when the limit allows its bytes. When ctx
// is done a read returns ctx's error (and none of the bytes it read). The
// reader hides r's type, so a request body made from it needs an explicit
// ContentLength.
func (l *Limiter) Wrap(ctx context.Context, r io.Reader) io.Reader {
	return &bwReader{l: l, ctx: ctx, r: r}
}

type bwReader struct {
	l   *Limiter
	ctx context.Context
	r   io.Reader
}

func (r *bwReader) Read(p []byte) (int, error) {
	if r.l.unlimited.Load() {
		n, err := r.r.Read(p)
		if n > 0 {
			r.l.count(n)
		}
		if err != nil {
			// The stream's end: its last batch is stamped now, not at the
			// next look at the rate (which may come minutes later and would
			// show an upload long over as the current rate).
			r.l.mu.Lock()
			r.l.flushMeter(r.l.now())
			r.l.mu.Unlock()
		}
		return n, err
	}
	if c := r.l.chunk(); len(p) > c {
		p = p[:c]
	}
	n, err := r.r.Read(p)
	if n > 0 {
		if werr := r.l.WaitN(r.ctx, n); werr != nil {
			return 0, werr
		}
	}
	return n, err
}

// bwMeter counts bytes per second of the clock over the last bwMeterSeconds.
type bwMeter struct {
	start time.Time
	sec   [bwMeterSeconds]int64 // the Unix second each slot counts
	bytes [bwMeterSeconds]int64
}

func (m *bwMeter) add(now time.Time, n int64) {
	s := now.Unix()
	i := bwMod(s, bwMeterSeconds)
	if m.sec[i] != s {
		m.sec[i], m.bytes[i] = s, 0
	}
	m.bytes[i] += n
}

// rate averages the slots of the last bwMeterSeconds seconds, the current
// one included, over the time they span (less if the limiter is younger, but
// at least a second, so that a first burst does not read as a huge rate).
func (m *bwMeter) rate(now time.Time) int64 {
	s := now.Unix()
	var sum int64
	for i := range m.sec {
		if m.sec[i] > s-bwMeterSeconds && m.sec[i] <= s {
			sum += m.bytes[i]
		}
	}
	from := time.Unix(s-bwMeterSeconds+1, 0)
	if m.start.After(from) {
		from = m.start
	}
	span := max(now.Sub(from).Seconds(), 1)
	return int64(float64(sum) / span)
}

func bwMod(a, b int64) int {
	return int((a%b + b) % b)
}
