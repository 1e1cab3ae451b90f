// Package pace keeps the API requests of one token within the server's rate
// limits, so that the daemon's own traffic never earns a 429.
//
// # The model
//
// The server limits requests per token and per limit class in fixed windows,
// and every answer says X-RateLimit-Limit, -Remaining and -Reset. Which class
// a route is in is not documented: a route's first answer names its Limit,
// and routes with one Limit share one class (if they are really separate
// budgets, we only go slower). Per class the pacer follows one window, and
// the server's count is the truth: within a window the least Remaining seen
// wins, and nothing is counted locally that an answer can tell.
//
// Release rule: a token bucket over the server's window. Its tokens are the
// window's Remaining less our requests in flight and less a reserve for the
// token's other clients; a request leaves while a token is left and waits
// for Reset (plus jitter) when none is. Not GCRA: GCRA spreads a window's
// budget over it, while a fixed-window server lets a backlog spend a window
// at its start; spreading ends a batch up to a window late. Two guards keep
// a count that is a round trip old from overrunning the window: in its last
// slots (the last quarter, at least the last 10) a request waits for the
// answer of the one before it, and while a window is unknown (at start,
// after Reset, loaded from the state file) one request goes and its answer
// tells the window.
//
// Share factor: expect, the requests the token's other clients spend per
// window. What an answer's count shows beyond our own requests is theirs; a
// 429 shows the window spent. The reserve kept for them is the largest of
// what expect leaves them to spend (the first time they show up, as much
// again as they spent), one slot while anyone else is around, and peers,
// their most requests between two answers of ours (what may be on its way to
// the server while we decide). In a class of more than 10, once peers are
// seen, the reserve shrinks so that a fleet ends a shared backlog together:
// below our fair share (limit / (peers+1)) all but one free slot are ours,
// past it we keep the others no more than peers / (peers+1) of what is left.
//
// At a window's end what the others spent becomes expect if we looked at
// the window as late as they first showed in it (within the jitter);
// otherwise expect only grows, as they may have spent after our last look,
// and it halves after a window seen late enough without them or after ten
// windows in a row without them. expect stays at most limit − 2, so that we
// look at every window after our first request.
//
// A 429 is the caller's to retry through the one retry rule (state.Policy);
// the pacer only learns from it: the window is spent, and a Retry-After that
// ends more than a second beyond Reset holds the class, as a spent window,
// until then. There is no backoff of the pacer's own. No wait exceeds MaxWait
// (plus jitter). Reset is the server's clock, read through the least
// now − Date seen, so skew cancels.
//
// A route of unknown class sends one request (a probe) and holds the others
// until its answer; the probe waits while a class it may be in is spent and
// holds a slot in every current one. A read route may only be in classes
// that hold a known read route, so a poll never waits on a spent write
// class. Routes that send no rate-limit headers are held only by a 429. The
// route→class map is saved (state.go), so it is known after a restart.
//
// # Per class
//
//	field      changed by                                     why
//	limit      the class's first answer (X-RateLimit-Limit)    names the class
//	remaining  an answer of the window: the least; 0 at a 429  the server's count (answers come out of order)
//	reset      an answer naming a later window                 which window a count belongs to (server epoch s)
//	resetAt    that answer: Reset on our clock + jitter; a     when the window renews here; zero: unknown,
//	           Retry-After beyond it                           send one request to learn it
//	inFlight   +1 at admission, −1 at the answer               ours, not yet in any count
//	own        +1 per counted answer of the window, or per     tells our use from the others'
//	           request that got none; a loaded window's first
//	           answer adds what the file did not show
//	others     limit − remaining − own − inFlight, if more;    the others' use of the window (a lower bound)
//	           at a 429, all of the window that is not ours
//	expect     the window's end (above)                        the share factor
//	peers      the most others' requests between two answers   what may be in flight towards the server;
//	           of ours; 0 after a window without others        sets the fleet's fair share
//	late       the first sighting of others in a window        how late they show (lead before Reset)
//	quiet      window's end: 1 after one with others, +1       how long they have not shown; 0: this
//	           after one without; 0 at an answer as late       window was seen late enough to trust
package pace

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Class labels: 5/10 per minute is the documented strict class, 120/240 the
// normal class (free/paid); anything else is labelled by its number.
const (
	ClassStrict = "strict"
	ClassNormal = "normal"
)

// ClassName returns the metric label of a limit class.
func ClassName(limit int) string {
	switch {
	case limit <= 10:
		return ClassStrict
	case limit == 120 || limit == 240:
		return ClassNormal
	}
	return "limit_" + strconv.Itoa(limit)
}

const (
	DefaultJitter  = 200 * time.Millisecond
	DefaultMaxWait = 2 * time.Minute
	assumedWindow  = time.Minute // an answer with Remaining but no Reset: the documented limits are per minute
	carefulSlots   = 10          // a window's last slots, at least, go one at a time
	quietWindows   = 10          // others unseen this many windows in a row are forgotten by halves
)

// Options configures a Pacer; every field is optional. Now, Timer and Rand
// let tests drive it on a fake clock.
type Options struct {
	Now   func() time.Time
	Timer func(d time.Duration) (c <-chan time.Time, stop func() bool) // default time.NewTimer
	Rand  func() float64                                               // uniform in [0,1)
	// Jitter is the largest random delay added to a window's Reset and to a
	// Retry-After hold, so that the token's clients do not fire at one
	// instant. Default DefaultJitter; negative: none.
	Jitter  time.Duration
	MaxWait time.Duration // caps any wait; default DefaultMaxWait
	// StateFile keeps the windows and the route→class map across restarts
	// (state.go); the daemon passes <state_dir>/pacer.json.
	StateFile string
	Logger    zerolog.Logger
	Waited    func(d time.Duration) // how long a request was held back (ratelimit_wait_seconds_total)
}

// Hold says why Wait holds a request back: the class's label ("unknown" for
// a route whose class is not known yet), the reason, and when it is expected
// to end (zero: at an answer in flight).
type Hold struct {
	Class  string
	Reason string
	Until  time.Time
}

type holdKey struct{}

// WithHoldReport returns a context whose Waits call report when they start
// holding a request back or their reason changes, and with a zero Hold when
// they return; a worker shows its job's wait by it.
func WithHoldReport(ctx context.Context, report func(Hold)) context.Context {
	return context.WithValue(ctx, holdKey{}, report)
}

// Answer is what one response said of the rate limit; the API client reads
// it from the headers (uploader/api).
type Answer struct {
	Status     int           // the HTTP status: a 429 says the window is spent
	Limit      int           // X-RateLimit-Limit; 0: absent
	Remaining  int           // X-RateLimit-Remaining; negative: absent
	Reset      time.Time     // X-RateLimit-Reset; zero: absent
	Date       time.Time     // the server's clock (Date); zero: absent
	RetryAfter time.Duration // Retry-After; 0: absent
}

// NotSent is the release value of a slot given back unused: unlike nil (no
// answer came), it costs no budget.
var NotSent = &Answer{}

// Pacer paces the API requests of one token; safe for concurrent use. Give
// every client using the token the same Pacer.
type Pacer struct {
	o Options // with the defaults filled in

	saveMu  sync.Mutex // one write of the state file at a time; taken before mu, never under it
	failing bool       // under saveMu: the last write failed (logged once)

	mu      sync.Mutex
	classes map[int]*class    // by limit
	routes  map[string]*class // route → class, once an answer named it
	probes  map[string]bool   // routes of unknown class whose probe is out
	reads   map[string]bool   // routes Wait was told only read
	changed chan struct{}     // closed and replaced at every answer
	// parked maps the timer stop of each caller parked in Wait to the limit
	// of its route's class (0: unknown). An answer stops every timer before
	// it wakes the callers, so a pending timer is always a parked caller (a
	// fake clock advances by that count).
	parked map[*func() bool]int
	lag    time.Duration // the least local now − Date seen (none yet: the largest Duration)
}

// class is one limit class (limit 0: a route without rate-limit headers);
// the package doc's table says what each field is.
type class struct {
	limit, remaining int
	reset            int64
	resetAt          time.Time
	inFlight         int
	own, others      int
	expect, peers    int
	late             time.Duration
	quiet            int
}

// ticket is one admitted request and the classes it holds a slot in: its
// route's, or for a probe (a route of unknown class) every current class the
// route may be in.
type ticket struct {
	route string
	in    []*class
}

// New returns a Pacer; with a StateFile it starts from the saved windows (a
// missing file is a first start, an unreadable one is logged and ignored).
func New(o Options) *Pacer {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timer == nil {
		o.Timer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	o.Jitter = max(cmp.Or(o.Jitter, DefaultJitter), 0) // zero: the default; negative: none
	o.MaxWait = cmp.Or(max(o.MaxWait, 0), DefaultMaxWait)
	p := &Pacer{o: o, classes: map[int]*class{}, routes: map[string]*class{}, probes: map[string]bool{},
		reads: map[string]bool{}, changed: make(chan struct{}), parked: map[*func() bool]int{}, lag: math.MaxInt64}
	if o.StateFile != "" {
		p.load()
	}
	return p
}

// Wait blocks until route may send one request and returns the function to
// call with its answer (nil: none came; NotSent: not sent). read says the
// route only reads (GET). The release must be called once; until then the
// request counts as in flight. Wait returns ctx's error when ctx ends.
func (p *Pacer) Wait(ctx context.Context, route string, read bool) (release func(*Answer), err error) {
	report, _ := ctx.Value(holdKey{}).(func(Hold))
	shown, since := "", time.Time{} // the reason last reported; when the hold began
	defer func() {
		if shown != "" && report != nil {
			report(Hold{})
		}
		if shown != "" && p.o.Waited != nil {
			p.o.Waited(p.o.Now().Sub(since))
		}
	}()
	for ctx.Err() == nil {
		now := p.o.Now()
		p.mu.Lock()
		if read {
			p.reads[route] = true
		}
		t, d, why := p.admit(route, read, now)
		if t != nil {
			spent := p.spent(now, t.in)
			p.mu.Unlock()
			if spent {
				_ = p.save() // a failure is logged
			}
			var once sync.Once
			return func(a *Answer) { once.Do(func() { p.release(t, a) }) }, nil
		}
		timer := max(d, time.Millisecond)
		if d == 0 {
			timer = p.o.MaxWait // until an answer; the cap is a guard
		}
		c, stop := p.o.Timer(timer)
		h, limit := Hold{Class: "unknown", Reason: why}, 0
		if rc := p.routes[route]; rc != nil && rc.limit > 0 {
			h.Class, limit = ClassName(rc.limit), rc.limit
		}
		if d > 0 {
			h.Until = now.Add(d)
		}
		p.parked[&stop] = limit
		ch := p.changed
		p.mu.Unlock()
		if shown == "" {
			since = now
		}
		if why != shown {
			shown = why
			p.o.Logger.Debug().Str("route", route).Str("reason", why).Float64("wait_s", d.Seconds()).Msg("pacer holding request")
			if report != nil {
				report(h)
			}
		}
		select {
		case <-ctx.Done():
		case <-ch:
		case <-c:
		}
		p.mu.Lock()
		delete(p.parked, &stop)
		p.mu.Unlock()
		stop()
	}
	return nil, ctx.Err()
}

// admit reserves a slot for route (a ticket) or says how long to wait before
// asking again (0: until an answer, which wakes every caller) and why.
func (p *Pacer) admit(route string, read bool, now time.Time) (*ticket, time.Duration, string) {
	c := p.routes[route]
	switch {
	case c == nil && p.probes[route]:
		return nil, 0, "waiting for the answer of the route's first request, which names its class"
	case c == nil:
		return p.admitProbe(route, read, now)
	case c.blocked(now) > 0:
		return nil, c.blocked(now), "no request left in the window"
	case c.limit == 0 || !c.current(now) && c.inFlight == 0:
	case !c.current(now):
		return nil, 0, "a new window: waiting for the answer of its first request"
	case c.remaining-c.inFlight-c.reserve() <= 0:
		return nil, c.resetAt.Sub(now), "leaving the rest of the window to the token's other clients"
	case c.inFlight > 0 && c.remaining-c.inFlight <= max(carefulSlots, c.limit/4):
		return nil, 0, "the window's last requests go one at a time; waiting for the one in flight"
	}
	c.inFlight++
	return &ticket{route: route, in: []*class{c}}, 0, ""
}

// admitProbe admits the first request of a route of unknown class, whose
// probe is not out: while no class it may be in is spent (a read route: a
// class that holds a known read route); it holds a slot in each current one,
// or a known route could spend the same last slot.
func (p *Pacer) admitProbe(route string, read bool, now time.Time) (*ticket, time.Duration, string) {
	readIn := map[*class]bool{} // the classes that hold a known read route
	for name, c := range p.routes {
		readIn[c] = readIn[c] || p.reads[name]
	}
	t := &ticket{route: route}
	var wait time.Duration
	for _, c := range p.classes {
		if read && !readIn[c] {
			continue
		}
		if d := c.blocked(now); d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
		if c.current(now) {
			t.in = append(t.in, c)
		}
	}
	if wait > 0 {
		return nil, wait, "a class the route may be in has nothing left"
	}
	for _, c := range t.in {
		c.inFlight++
	}
	p.probes[route] = true
	return t, 0, ""
}

// current says c's window is known and not over.
func (c *class) current(now time.Time) bool { return !c.resetAt.IsZero() && now.Before(c.resetAt) }

// blocked returns how long c admits nothing: its window is spent (or held by
// a 429's Retry-After).
func (c *class) blocked(now time.Time) time.Duration {
	if c.current(now) && c.remaining-c.inFlight <= 0 {
		return c.resetAt.Sub(now)
	}
	return 0
}

// reserve is what the window keeps for the token's other clients (package
// doc: the share factor, one slot, peers; and in a class of more than
// carefulSlots with peers seen, the fleet's fair share).
func (c *class) reserve() int {
	e := cmp.Or(c.expect, 2*c.others) // none yet: as much again as they spent
	r := max(e-c.others, min(1, e), c.peers)
	left := c.remaining - c.inFlight
	switch {
	case c.limit <= carefulSlots || c.peers == 0:
	case c.own+c.inFlight < c.limit/(c.peers+1): // below our fair share
		r = min(r, max(1, left-1))
	default: // past it: the others' share of what is left
		r = min(r, left-left/(c.peers+1))
	}
	return r
}

// roll ends a window's accounting: expect and peers for the next one.
// expect becomes the most of what the others spent and itself, halved first
// after a window seen late enough (quiet 0) or a window without them after a
// long quiet (quiet > quietWindows); it stays at most limit − 2.
func (c *class) roll() {
	if c.quiet == 0 || c.quiet > quietWindows && c.others == 0 {
		c.expect /= 2
	}
	c.expect = min(max(c.expect, c.others), c.limit-2)
	c.quiet++
	if c.others > 0 {
		c.quiet = 1
	} else {
		c.peers = 0
	}
	c.own, c.others = 0, 0
}

// sawOthers raises the others' use of the window to f; lead is how long
// before Reset they showed.
func (c *class) sawOthers(f int, lead time.Duration) {
	if c.others == 0 && f > 0 {
		c.late = lead
	}
	c.others = max(c.others, f)
}

func (p *Pacer) classOf(limit int) *class {
	c := p.classes[limit]
	if c == nil {
		c = &class{limit: limit, quiet: 1}
		p.classes[limit] = c
	}
	return c
}

func (p *Pacer) jitter() time.Duration {
	if r := p.o.Rand(); r > 0 && r < 1 {
		return time.Duration(r * float64(p.o.Jitter))
	}
	return 0
}

// release folds one answer into the state and wakes the parked callers.
func (p *Pacer) release(t *ticket, a *Answer) {
	now := p.o.Now()
	p.mu.Lock()
	learned := p.settle(t, a, now)
	write := learned || p.spent(now, append(t.in, p.routes[t.route]))
	for stop := range p.parked {
		(*stop)()
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if write {
		_ = p.save() // a failure is logged
	}
}

// settle folds a into the state; learned says it named a route's class or a
// new window, which a restart must know.
func (p *Pacer) settle(t *ticket, a *Answer, now time.Time) (learned bool) {
	for _, c := range t.in {
		c.inFlight--
	}
	delete(p.probes, t.route) // a probe's route has no class until its answer; a known route has no probe out
	c := p.routes[t.route]    // nil: t is a probe
	switch {
	case a == NotSent:
		return false
	case a == nil: // no answer: the request may have been counted; assume it was
		if c != nil && c.current(now) && c.remaining > 0 {
			c.remaining--
			c.own++
		}
		return false
	}
	if a.Limit > 0 && (c == nil || c.limit != a.Limit) {
		p.o.Logger.Debug().Str("route", t.route).Str("class", ClassName(a.Limit)).Int("limit", a.Limit).Msg("pacer learned rate-limit class")
		c, learned = p.classOf(a.Limit), true
	} else if c == nil {
		c = &class{} // no headers: held only by a Retry-After
	}
	p.routes[t.route] = c
	limited := a.Status == 429 // Too Many Requests
	if c.limit > 0 && a.Remaining >= 0 {
		learned = p.observe(c, a, !limited, now) || learned
	}
	if limited {
		p.limited(t.route, c, a.RetryAfter, now)
	}
	return learned
}

// observe folds an answer's Remaining and Reset into c: within one window
// the least Remaining wins, an older window's answer is ignored. counted:
// the server charged the request (not a 429). It says whether the answer
// named a new window.
func (p *Pacer) observe(c *class, a *Answer, counted bool, now time.Time) bool {
	in, raw, remaining := assumedWindow, int64(0), a.Remaining
	if !a.Reset.IsZero() {
		raw, in = a.Reset.Unix(), a.Reset.Sub(now)
		if !a.Date.IsZero() {
			in += p.leastLag(now.Sub(a.Date)) // Reset on our clock
		}
		if raw < c.reset {
			return false
		}
		same := raw == c.reset
		if !same {
			c.roll()
		}
		looked := c.own > 0
		if counted {
			c.own++
		}
		f := c.limit - remaining - c.own - c.inFlight
		if looked && f > c.others {
			c.peers = max(c.peers, f-c.others)
		}
		if counted && same && c.resetAt.IsZero() && f > c.others {
			c.own += f - c.others // a loaded window's first answer: what the file did not show is the last process's
		} else {
			c.sawOthers(f, in)
		}
		if counted && in <= c.late+p.o.Jitter {
			c.quiet = 0 // we looked as late as they showed (clients meet a Reset within the jitter)
		}
		if same && c.current(now) {
			c.remaining = min(c.remaining, remaining)
			return false
		}
	}
	if in > p.o.MaxWait {
		p.o.Logger.Warn().Str("class", ClassName(c.limit)).Float64("reset_in_s", in.Seconds()).Float64("capped_to_s", p.o.MaxWait.Seconds()).
			Msg("rate-limit reset is further away than a window can be; capping the wait (clock skew or server error)")
		in = p.o.MaxWait
	}
	c.remaining, c.reset, c.resetAt = remaining, raw, time.Time{}
	if in > 0 { // else the window has renewed by the server's clock: probe the next
		c.resetAt = now.Add(in + p.jitter())
	}
	return raw != 0
}

// limited learns from a 429: the window is spent, by others beyond our own,
// and a Retry-After ending more than a second after Reset (whole seconds: one
// within a second is the Reset rounded up) holds c as spent until then.
func (p *Pacer) limited(route string, c *class, retryAfter time.Duration, now time.Time) {
	if c.current(now) {
		c.remaining = 0
		c.sawOthers(c.limit-c.own-c.inFlight, c.resetAt.Sub(now))
	}
	if until := now.Add(retryAfter); retryAfter > 0 && (!c.current(now) || until.After(c.resetAt.Add(time.Second))) {
		until = until.Add(p.jitter())
		if limit := now.Add(p.o.MaxWait + p.jitter()); until.After(limit) {
			p.o.Logger.Warn().Float64("wanted_s", until.Sub(now).Seconds()).Msg("rate-limit hold capped")
			until = limit
		}
		c.remaining, c.resetAt = 0, until
	}
	ev := p.o.Logger.Warn().Str("route", route).Str("class", ClassName(c.limit))
	if d := c.blocked(now); d > 0 {
		ev = ev.Float64("hold_s", d.Seconds())
	}
	ev.Msg("rate limited (HTTP 429); the retry rule decides when to try again")
}

// leastLag folds a sample of local now − Date into the clocks' offset: the
// smallest is the closest (Date is whole seconds); one more than two seconds
// above it means the local clock jumped.
func (p *Pacer) leastLag(sample time.Duration) time.Duration {
	if sample < p.lag || sample-2*time.Second > p.lag {
		p.lag = sample
	}
	return p.lag
}

// ClassState is the pacer's view of one limit class, for status pages.
type ClassState struct {
	Class     string
	Limit     int
	Remaining int       // as last reported, less the requests in flight
	Reset     time.Time // zero when no current window is known
	Held      bool      // nothing may leave until Reset: spent, or held by a 429's Retry-After
	Waiting   int       // requests of this class the pacer is holding back now
	InFlight  int       // requests of this class sent and not yet answered
	Others    int       // what other clients of the token spent in this window (a lower bound)
}

// Classes returns the known limit classes, in name order.
func (p *Pacer) Classes() []ClassState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.o.Now()
	waiting := map[int]int{} // by limit
	for _, limit := range p.parked {
		waiting[limit]++
	}
	out := make([]ClassState, 0, len(p.classes))
	for _, c := range p.classes {
		cs := ClassState{Class: ClassName(c.limit), Limit: c.limit, Remaining: c.limit, Held: c.blocked(now) > 0,
			Waiting: waiting[c.limit], InFlight: c.inFlight, Others: c.others}
		if c.current(now) {
			cs.Remaining, cs.Reset = max(c.remaining-c.inFlight, 0), c.resetAt
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b ClassState) int { return cmp.Compare(a.Class, b.Class) })
	return out
}
