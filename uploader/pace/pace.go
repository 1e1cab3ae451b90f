// Package pace keeps the requests of one API token within the server's rate
// limits, so that the daemon's own traffic never earns a 429.
//
// The server limits requests per token and per limit class, and every answer
// says X-RateLimit-Limit, -Remaining and -Reset. Which class a route is in is
// not documented: the first answer of a route names its Limit, and routes
// with one Limit share one class (if they are really separate budgets, we
// only go slower). Per class the pacer keeps one window, and the server's
// count is the truth: the pacer never counts on its own what an answer can
// tell it.
//
// The release rule is a token bucket over the server's window: its tokens are
// the window's Remaining, refilled by the server at Reset, less our requests
// in flight and less a reserve for the token's other clients. A request
// leaves while a token is left and waits for Reset when none is. Not GCRA:
// GCRA spreads a window's budget evenly over it, while a fixed-window server
// lets a backlog spend a window at its start; spreading ends a batch up to a
// window later than the limit allows. Two refinements keep a stale count
// from overrunning the window: in a window's last slots (its last quarter,
// and at least the last 10: a strict class's whole window) a request waits
// for the answer of the one before it, so it leaves on a count that includes
// everyone's sends up to a round trip ago; and while a window is unknown (at
// start, after Reset, or loaded from the state file and not yet confirmed)
// one request goes at a time, and its answer tells the window.
//
// The share factor is expect, the requests the token's other clients are
// expected to spend per window. What an answer's count shows beyond our own
// requests is theirs (a lower bound); a 429 shows the window spent, so all of
// it that is not ours is theirs. The reserve, what a window keeps for them,
// is the largest of:
//   - what expect leaves them to spend in this window (the first time they
//     show up, as much again as they have spent);
//   - one slot while anyone else is around: a neighbour spending it between
//     our count and our request would turn it into our 429;
//   - peers, the most requests of theirs counted between two answers of ours:
//     what may be in flight towards the server while we decide (a fleet's
//     daemons send on counts a round trip old).
//
// Two rules let a fleet's daemons end a shared backlog together, in a class
// of more than 10 per window, once peers is seen (in a smaller class every
// request waits for the answer of the one before it, and one slot taken is a
// 429, so the share is kept whole):
//   - a fair share: while our use of the window is below limit / (peers + 1),
//     a slot of the others' share is ours while more than one is left, so a
//     daemon that met the window late (its Reset's jitter) does not leave the
//     others the most they ever spent and end with the backlog's last files;
//   - a share of what is left: past it, we keep for the others no more than
//     peers / (peers + 1) of the window's rest, so each daemon may take one of
//     every peers + 1 slots left while peers stay free for what is in flight,
//     and the daemon holding the last file does not keep a window for peers
//     that have run out.
//
// At a window's end what the others spent becomes expect if we looked at the
// window as late as they were first seen in the last window they spent in
// (within the jitter: clients meet a Reset that far apart); when they did
// not show, expect halves instead of vanishing (their first requests may
// have landed just after our look). If we stopped looking earlier, they may
// have spent more than we saw, and expect only grows: a neighbour that spends
// late in each window keeps its share, for ten windows in a row without a
// sighting or a look as late as theirs (then it halves all the same). expect never exceeds limit − 2, so that we
// look at every window at least once after our first request: a daemon left
// only its first request per window could never see its peers go. The cost:
// a fleet of as many daemons as the limit (five on 5 per window) spends each
// window on the daemons' first requests alone, and draws about two 429s per
// window (TestPacerFleetOfFive).
//
// A 429 is the caller's error to retry through the one retry rule
// (state.Policy); the pacer only learns from it: the window is spent until
// its Reset, and a Retry-After that ends more than a second beyond Reset
// holds the class as a spent window until then (an answer naming a later
// window ends it). There is no backoff of the pacer's own.
//
// Per class (the fields of class), in three parts: the server's window, our
// use and the others' in it, and the share estimate carried across windows.
//
//	field      changed by                                   why
//	limit      the class's first answer (X-RateLimit-Limit)  names the class; routes with one limit share it
//	remaining  each answer of the window: the least one;     the server's count; answers arrive out of order
//	           0 at a 429
//	reset      an answer naming a later window               which window the count belongs to (server epoch s)
//	resetAt    that answer: now + (Reset − Date) + jitter;   when the window renews here; zero: unknown, probe it
//	           a 429's Retry-After ending beyond it          (loaded with budget: known by reset only)
//	inFlight   +1 at admission, −1 at the answer             ours, not yet in any count
//	own        +1 per counted answer of the window           tells our use from the others'
//	others     limit − remaining − own − inFlight − probes,  the others' use of the window so far (probes: ours of
//	           if more                                       routes not yet in a class, which may be in this one)
//	expect     the window's end (see above)                  the share factor: the others' use per window
//	peers      the others' use between two answers of ours   what may be in flight while we decide; 0 after a window without others
//	late       the first sighting of others in a window      how late in a window they show up (lead before Reset)
//	quiet      the window's end: 1 after one with others,    how long the others have not shown, for forgetting
//	           +1 after one without; 0 at an answer as late  them; 0: this window was seen as late as they show
//	           as late (within the jitter)
//
// A route's class, once learned, is kept in the state file, so it is known
// from the first request after a restart. A route whose class is unknown
// sends one request (a probe) and holds the others until its answer; the
// probe waits while a known class it may be in has nothing left, and holds a
// slot in each. A read route is taken to be only in classes that hold a known
// read route: a poll never waits on a spent write class. Routes that send no
// rate-limit headers are held only by a 429's Retry-After.
//
// Clocks: Reset is the server's epoch seconds; translated through the
// answer's Date (the least now − Date seen, as Date is whole seconds), so
// skew cancels. No wait exceeds MaxWait (plus jitter), and a capped wait is
// logged.
package pace

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
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

// Defaults.
const (
	DefaultJitter          = 200 * time.Millisecond
	DefaultMaxWait         = 2 * time.Minute
	DefaultPersistInterval = 500 * time.Millisecond
	// assumedWindow is the window of an answer with Remaining but no
	// Reset: the documented limits are per minute.
	assumedWindow = time.Minute
	// carefulSlots: a window's last slots, at least, go one at a time.
	carefulSlots = 10
	// quietWindows: others not seen for this many windows in a row are
	// forgotten by halves even if we never looked as late as they spent.
	quietWindows = 10
)

// Observer receives the pacer's metrics; uploader/api's Observer is one.
type Observer interface {
	RateLimit(class string, remaining int)
	RateLimitWait(d time.Duration)
}

type nopObserver struct{}

func (nopObserver) RateLimit(string, int)       {}
func (nopObserver) RateLimitWait(time.Duration) {}

// Options configures a Pacer; every field is optional. The clock fields let
// tests drive it without sleeping.
type Options struct {
	Now func() time.Time
	// Timer starts a timer; stop cancels it. Default time.NewTimer.
	Timer func(d time.Duration) (c <-chan time.Time, stop func() bool)
	Rand  func() float64 // uniform in [0,1); default math/rand/v2
	// Jitter is the largest random delay added to a window's Reset and to
	// a Retry-After hold, so that the token's clients do not fire at one
	// instant. Default DefaultJitter; negative means none.
	Jitter  time.Duration
	MaxWait time.Duration // caps any wait; default DefaultMaxWait
	// StateFile keeps the windows and the route→class map across restarts
	// (state.go); the daemon passes <state_dir>/pacer.json.
	StateFile string
	// PersistInterval: Run writes ordinary changes at most this often.
	// Default DefaultPersistInterval; negative: at every change.
	PersistInterval time.Duration
	Logger          zerolog.Logger
	Observer        Observer
}

// Hold says why Wait holds a request back: the class's label ("unknown"
// for a route whose class is not known yet), the reason, and when it is
// expected to end (zero: at an answer in flight).
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

// NotSent is the release value of a slot given back unused: unlike nil (no
// answer), it costs no budget.
var NotSent = &http.Response{}

// Pacer paces the API requests of one token; safe for concurrent use. Give
// every client using the token the same Pacer.
type Pacer struct {
	o     Options // with the defaults filled in
	store *store  // nil without a state file

	mu      sync.Mutex
	classes map[int]*class     // by limit
	routes  map[string]*class  // route → class, once an answer named it
	probes  map[string]*ticket // routes of unknown class: the probe out
	reads   map[string]bool    // the routes Wait was told only read
	changed chan struct{}      // closed and replaced at every answer
	// parked holds the timer stops of goroutines parked in Wait; an answer
	// stops them all before it wakes them, so a pending timer is always a
	// parked goroutine (tests drive a fake clock by that count).
	parked   map[*func() bool]struct{}
	held     map[int]int   // callers parked in Wait, by the limit of their route's class (0: unknown)
	lag      time.Duration // the least local now − Date seen
	lagKnown bool
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
// route's, or for a probe every current class the route may be in.
type ticket struct {
	route string
	probe bool
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
	if o.Jitter == 0 {
		o.Jitter = DefaultJitter
	}
	o.Jitter = max(o.Jitter, 0)
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	p := &Pacer{o: o, classes: map[int]*class{}, routes: map[string]*class{}, probes: map[string]*ticket{},
		reads: map[string]bool{}, changed: make(chan struct{}), parked: map[*func() bool]struct{}{}, held: map[int]int{}}
	if o.StateFile != "" {
		p.store = newStore(o.StateFile, o.PersistInterval)
		p.load()
	}
	return p
}

// Wait blocks until route may send one request and returns the function to
// call with its response (nil: none came; NotSent: not sent). read says the
// route only reads (GET). The release must be called once; until then the
// request counts as in flight. Wait returns ctx's error when ctx ends.
func (p *Pacer) Wait(ctx context.Context, route string, read bool) (release func(*http.Response), err error) {
	var start time.Time
	report, _ := ctx.Value(holdKey{}).(func(Hold))
	var shown string // the reason last reported
	defer func() {
		if shown != "" {
			report(Hold{})
		}
	}()
	for {
		if err := ctx.Err(); err != nil {
			p.recordWait(start)
			return nil, err
		}
		now := p.o.Now()
		p.mu.Lock()
		if read {
			p.reads[route] = true
		}
		t, d, why := p.admit(route, read, now)
		if t != nil {
			urgent := p.urgent(now, t.in)
			p.mu.Unlock()
			if urgent {
				_ = p.save() // a failure is logged
			}
			p.recordWait(start)
			var once sync.Once
			return func(resp *http.Response) { once.Do(func() { p.release(t, resp) }) }, nil
		}
		c, stop := p.o.Timer(max(d, time.Millisecond))
		p.parked[&stop] = struct{}{}
		limit := 0
		if rc := p.routes[route]; rc != nil {
			limit = rc.limit
		}
		p.held[limit]++
		ch := p.changed
		p.mu.Unlock()
		if report != nil && why != shown {
			h := Hold{Class: "unknown", Reason: why}
			if limit > 0 {
				h.Class = ClassName(limit)
			}
			if d < p.o.MaxWait {
				h.Until = now.Add(d)
			}
			shown = why
			report(h)
		}
		if start.IsZero() {
			start = now
			p.o.Logger.Debug().Str("route", route).Str("reason", why).Float64("wait_s", d.Seconds()).Msg("pacer holding request")
		}
		select {
		case <-ctx.Done():
		case <-ch:
		case <-c:
		}
		p.mu.Lock()
		delete(p.parked, &stop)
		p.held[limit]--
		p.mu.Unlock()
		stop()
	}
}

func (p *Pacer) recordWait(start time.Time) {
	if !start.IsZero() {
		if d := p.o.Now().Sub(start); d > 0 {
			p.o.Observer.RateLimitWait(d)
		}
	}
}

// admit reserves a slot for route (ticket) or says how long to wait before
// asking again (an answer may wake the caller sooner).
func (p *Pacer) admit(route string, read bool, now time.Time) (*ticket, time.Duration, string) {
	c := p.routes[route]
	if c == nil {
		return p.admitProbe(route, read, now)
	}
	if d := c.blocked(now); d > 0 {
		return nil, d, "no request left in the window"
	}
	switch {
	case c.limit == 0 || !c.current(now) && c.inFlight == 0:
	case !c.current(now):
		return nil, p.o.MaxWait, "a new window: waiting for the answer of its first request"
	case c.remaining-c.inFlight-c.reserve() <= 0:
		return nil, c.resetAt.Sub(now), "leaving the rest of the window to the token's other clients"
	case c.inFlight > 0 && c.remaining-c.inFlight <= max(carefulSlots, c.limit/4):
		return nil, p.o.MaxWait, "the window's last requests go one at a time; waiting for the one in flight"
	}
	c.inFlight++
	return &ticket{route: route, in: []*class{c}}, 0, ""
}

// admitProbe admits the first request of a route of unknown class: one at a
// time, while no known class it may be in has nothing left; it holds a slot
// in each current one, or a known route could spend the same last slot.
func (p *Pacer) admitProbe(route string, read bool, now time.Time) (*ticket, time.Duration, string) {
	if p.probes[route] != nil {
		return nil, p.o.MaxWait, "waiting for the answer of the route's first request, which names its class"
	}
	t := &ticket{route: route, probe: true}
	var wait time.Duration
	for _, c := range p.classes {
		if read && !p.holdsRead(c) {
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
	p.probes[route] = t
	return t, 0, ""
}

// probesOutside counts our probes in flight that hold no slot in c: they
// may turn out to be in c, and the server may have counted them already, so
// they are not the others' (two routes probed at once, a fresh start).
func (p *Pacer) probesOutside(c *class) int {
	n := 0
	for _, t := range p.probes {
		if !slices.Contains(t.in, c) {
			n++
		}
	}
	return n
}

// holdsRead says a known read route is in c.
func (p *Pacer) holdsRead(c *class) bool {
	for name, rc := range p.routes {
		if rc == c && p.reads[name] {
			return true
		}
	}
	return false
}

// current says c's window is known and not over.
func (c *class) current(now time.Time) bool {
	return !c.resetAt.IsZero() && now.Before(c.resetAt)
}

// blocked returns how long c admits nothing: its window is spent (or held
// by a 429's Retry-After).
func (c *class) blocked(now time.Time) time.Duration {
	if c.current(now) && c.remaining-c.inFlight <= 0 {
		return c.resetAt.Sub(now)
	}
	return 0
}

// reserve is what the window keeps for the token's other clients (see the
// package doc): in a class of more than carefulSlots, none of our fair share,
// and past it no more than their share of what is left.
func (c *class) reserve() int {
	e := c.expect
	if e == 0 {
		e = 2 * c.others
	}
	r := max(e-c.others, min(1, e), c.peers)
	switch {
	case c.limit <= carefulSlots || c.peers == 0:
	case c.own+c.inFlight < c.limit/(c.peers+1): // below our fair share
		r = min(r, max(1, c.remaining-c.inFlight-1))
	default: // our share of what is left
		left := c.remaining - c.inFlight
		r = min(r, left-left/(c.peers+1))
	}
	return r
}

// roll ends a window's accounting: expect and peers for the next one (see
// the package doc).
func (c *class) roll() {
	if c.quiet == 0 || c.quiet > quietWindows && c.others == 0 {
		c.expect = max(c.others, c.expect/2)
	} else {
		c.expect = max(c.expect, c.others)
	}
	c.quiet++
	if c.others > 0 {
		c.quiet = 1
	} else {
		c.peers = 0
	}
	c.expect = min(c.expect, c.limit-2)
	c.own, c.others = 0, 0
}

// sawOthers raises the others' use of the window to f; lead is how long
// before Reset they showed.
func (c *class) sawOthers(f int, lead time.Duration) {
	if f > c.others {
		if c.others == 0 {
			c.late = lead
		}
		c.others = f
	}
}

func (p *Pacer) classOf(limit int) *class {
	c := p.classes[limit]
	if c == nil {
		c = &class{limit: limit, quiet: 1}
		p.classes[limit] = c
	}
	return c
}

func (p *Pacer) jitterDur() time.Duration {
	r := p.o.Rand()
	if r < 0 || r >= 1 {
		r = 0
	}
	return time.Duration(r * float64(p.o.Jitter))
}

// release folds one answer into the state and wakes the parked callers.
func (p *Pacer) release(t *ticket, resp *http.Response) {
	now := p.o.Now()
	p.mu.Lock()
	p.settle(t, resp, now)
	urgent := p.urgent(now, append(t.in, p.routes[t.route]))
	for stop := range p.parked {
		(*stop)()
		delete(p.parked, stop)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if urgent {
		_ = p.save() // a failure is logged
	}
}

func (p *Pacer) settle(t *ticket, resp *http.Response, now time.Time) {
	for _, c := range t.in {
		c.inFlight--
	}
	if t.probe {
		delete(p.probes, t.route)
	}
	if resp == NotSent {
		return
	}
	c := p.routes[t.route]
	if resp == nil { // no answer: the request may have been counted; assume it was
		if !t.probe && c.current(now) && c.remaining > 0 {
			c.remaining--
			c.own++
		}
		return
	}
	limit, _ := strconv.Atoi(strings.TrimSpace(resp.Header.Get("X-RateLimit-Limit")))
	switch {
	case limit > 0:
		if nc := p.classOf(limit); c != nc {
			p.o.Logger.Debug().Str("route", t.route).Str("class", ClassName(limit)).Int("limit", limit).Msg("pacer learned rate-limit class")
			c = nc
			p.routes[t.route] = c
		}
	case c == nil:
		c = &class{} // no headers: held only by a Retry-After
		p.routes[t.route] = c
	}
	limited := resp.StatusCode == http.StatusTooManyRequests
	remaining, err := strconv.Atoi(strings.TrimSpace(resp.Header.Get("X-RateLimit-Remaining")))
	if c.limit > 0 && err == nil {
		p.observe(c, resp.Header, max(remaining, 0), !limited, now)
		p.o.Observer.RateLimit(ClassName(c.limit), max(remaining, 0))
	}
	if limited {
		p.limited(t.route, c, ParseRetryAfter(resp.Header, now), now)
	}
}

// observe folds an answer's Remaining and Reset into c. Within one window
// the least Remaining wins; an answer of an older window is ignored.
// counted: the server charged the request (not a 429).
func (p *Pacer) observe(c *class, h http.Header, remaining int, counted bool, now time.Time) {
	in, reset, raw := assumedWindow, ParseReset(h), int64(0)
	if !reset.IsZero() {
		raw, in = reset.Unix(), reset.Sub(now)
		if date, err := http.ParseTime(h.Get("Date")); err == nil {
			in += p.leastLag(now.Sub(date)) // Reset on our clock, through the least lag seen
		}
		if raw < c.reset {
			return
		}
		same := raw == c.reset
		if !same {
			c.roll()
		}
		looked := c.own > 0
		if counted {
			c.own++
		}
		f := c.limit - remaining - c.own - c.inFlight - p.probesOutside(c)
		if looked && f > c.others {
			c.peers = max(c.peers, f-c.others)
		}
		if counted && same && c.resetAt.IsZero() && f > c.others {
			// The first answer to a window known only by its Reset
			// (loaded): what the file did not show is the last process's
			// own requests.
			c.own += f - c.others
		} else {
			c.sawOthers(f, in)
		}
		if counted && in <= c.late+p.o.Jitter {
			c.quiet = 0 // we looked as late as they showed (the token's clients meet a Reset within the jitter)
		}
		if same && c.current(now) {
			c.remaining = min(c.remaining, remaining)
			return
		}
	}
	if in > p.o.MaxWait {
		p.o.Logger.Warn().Str("class", ClassName(c.limit)).Float64("reset_in_s", in.Seconds()).Float64("capped_to_s", p.o.MaxWait.Seconds()).
			Msg("rate-limit reset is further away than a window can be; capping the wait (clock skew or server error)")
		in = p.o.MaxWait
	}
	c.remaining, c.reset, c.resetAt = remaining, raw, time.Time{}
	if in > 0 { // else the window has renewed by the server's clock: probe the next
		c.resetAt = now.Add(in + p.jitterDur())
	}
}

// limited learns from a 429: the window is spent, by others beyond our own,
// and a Retry-After ending more than a second after the window's Reset
// (whole seconds: one within a second is the Reset rounded up) holds c as a
// spent window until then.
func (p *Pacer) limited(route string, c *class, retryAfter time.Duration, now time.Time) {
	if c.current(now) {
		c.remaining = 0
		c.sawOthers(c.limit-c.own-c.inFlight-p.probesOutside(c), c.resetAt.Sub(now))
	}
	if retryAfter > 0 {
		until := now.Add(retryAfter)
		if !c.current(now) || until.After(c.resetAt.Add(time.Second)) {
			until = until.Add(p.jitterDur())
			if limit := now.Add(p.o.MaxWait + p.jitterDur()); until.After(limit) {
				p.o.Logger.Warn().Float64("wanted_s", until.Sub(now).Seconds()).Msg("rate-limit hold capped")
				until = limit
			}
			c.remaining, c.resetAt = 0, until
		}
	}
	ev := p.o.Logger.Warn().Str("route", route).Str("class", ClassName(c.limit))
	if d := c.blocked(now); d > 0 {
		ev = ev.Float64("hold_s", d.Seconds())
	}
	ev.Msg("rate limited (HTTP 429); the retry rule decides when to try again")
}

// leastLag folds a sample of local now − Date into the clocks' offset: the
// smallest is the closest (Date is truncated to the second); one more than
// two seconds above it means the local clock jumped.
func (p *Pacer) leastLag(sample time.Duration) time.Duration {
	if !p.lagKnown || sample < p.lag || sample > p.lag+2*time.Second {
		p.lag, p.lagKnown = sample, true
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
	out := make([]ClassState, 0, len(p.classes))
	for _, c := range p.classes {
		cs := ClassState{Class: ClassName(c.limit), Limit: c.limit, Remaining: c.limit, Waiting: p.held[c.limit], InFlight: c.inFlight,
			Others: c.others, Held: c.blocked(now) > 0}
		if c.current(now) {
			cs.Remaining, cs.Reset = max(c.remaining-c.inFlight, 0), c.resetAt
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b ClassState) int { return strings.Compare(a.Class, b.Class) })
	return out
}
