package api

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

// The pacer keeps the daemon's own traffic from ever earning a 429.
//
// Model. The API limits requests per account and per limit class ("normal",
// "strict", ...), and tells every response's X-RateLimit-Limit, -Remaining and
// -Reset. Which class a route uses is not documented, so the pacer learns it:
// the first response of a route names its limit, and routes reporting the same
// limit share one bucket (sharing is the safe guess: if they really are
// separate budgets, we only go slower). A route whose class is not yet known
// sends one probe request and holds the others until the probe's headers
// arrive; the probe waits while a class it may belong to is spent (a read
// route is taken not to belong to a class that holds no known read route).
//
// Within a known window the pacer uses the budget it is told it has: with A
// requests available (Remaining minus requests in flight, which may or may
// not have been counted yet), a request leaves at once while A > 0, so a
// backlog drains at the rate the limit allows and a batch ends when the limit
// says it can. With nothing available it waits for Reset. When Reset has
// passed, the window is assumed renewed but unknown: one probe goes, the rest
// wait for its headers.
//
// Fresh counts. Remaining is only as fresh as the last answer. While many
// slots are left that does not matter; for a window's last slots (its last
// quarter, and at least the last 10: a strict class's whole window) a
// request waits for the answer of the one before it, so it leaves on a
// count that includes everyone's sends up to a round trip ago. Daemons
// draining one window then interleave instead of overrunning it together.
//
// Sharing. The limit belongs to the account, so other clients of the token
// (other machines, other daemons) spend the same window. The pacer knows how
// many of the window's counted requests are its own: responses that name the
// window, plus requests still in flight. What Remaining says was used beyond
// that is someone else's (a lower bound, so a neighbour is never invented
// from our own traffic); a 429 says the window was spent, so it counts too.
// Once others are seen in this window or the last one, the pacer stops
// racing them: it expects them to spend again what they spent last window
// (or, the first time, as much again as seen so far), and takes at most what
// that expected use leaves, at most an equal share of the window among the
// clients it infers (1 + others' use in units of ours; no cap when the last
// window was not spent), and never the last slot. The probe after a Reset
// always goes, so a heavy neighbour cannot starve the daemon entirely.
//
// Window roles. Daemons draining backlogs on one token meet every window at
// its Reset, and the server's count names one of them the window's opener:
// the one whose request it counted first (Remaining limit-1). The opener
// waits a moment (a fifth of the jitter, at least minLandSpan, plus two round
// trips) for the others' first requests of the window to land before its
// second; the others leave the window's last two slots instead of one; the
// opener then comes back for one on its old count and, on the fresh count
// that answer gives, takes what is left. The opener changes with every
// window's race to the Reset, so shares rotate; an opener that saw no one in
// its window forgets the others by halves, so a daemon whose peers have
// finished gets whole windows back within a few. (TestPacerFleet models
// three daemons on the fake clock.) A lone daemon that opens a strict window
// waits the same moment, so a peer starting at about the same time is seen
// before the window is spent.
//
// A 429 holds the whole class until its Reset, or a Retry-After that asks for
// more than a second beyond it (Retry-After is whole seconds: one within a
// second of Reset is Reset rounded up). At Reset it comes back with the same
// small jitter as at any window change, so all clients of the token meet the
// new window together and see each other in its count; a daemon that came
// back later would find it spent again.
//
// Restarts. With a state file (PacerOptions.StateFile, see pacerstate.go)
// the known windows, holds and the route→class map outlive the process, so a
// restarted daemon waits for a spent window's Reset instead of probing it.
//
// Clocks. Reset is epoch seconds by the server's clock. When the response has a
// Date header, Reset is translated through it (local = now + (Reset - Date)),
// which cancels clock skew; a Reset in the past by the server's own clock
// means the window has renewed. No single wait exceeds MaxWait (+ jitter), and
// a capped wait is logged, so a wild Reset cannot stall the daemon.

// Class labels. Limits are per minute: 5/10 are the documented strict class,
// 120/240 the normal class (free/paid). Anything else is labelled by its
// number, which stays low-cardinality because one token has few classes.
const (
	PacerClassStrict = "strict" // X-RateLimit-Limit <= 10
	PacerClassNormal = "normal" // X-RateLimit-Limit 120 or 240
)

// PacerClass returns the metric label of a limit class: "strict" for limits
// up to 10, "normal" for 120 and 240, else "limit_<N>".
func PacerClass(limit int) string {
	switch {
	case limit <= 10:
		return PacerClassStrict
	case limit == 120 || limit == 240:
		return PacerClassNormal
	}
	return "limit_" + strconv.Itoa(limit)
}

// Pacer defaults.
const (
	DefaultPacerJitter  = time.Second
	DefaultPacerMaxWait = 2 * time.Minute
	// DefaultPacerPersistInterval is how often, at most, ordinary changes
	// of the windows are written behind to the state file.
	DefaultPacerPersistInterval = 500 * time.Millisecond
	// pacer429Fallback is the first hold after a 429 that names neither a
	// future Reset nor Retry-After; it doubles on each consecutive 429.
	pacer429Fallback = 5 * time.Second
	// assumedWindow is the window used when a response carries
	// Remaining but no Reset: the documented limits are per minute.
	assumedWindow = time.Minute
)

// PacerOptions configures a Pacer. Every field is optional; the clock fields
// exist so tests can drive the pacer without sleeping.
type PacerOptions struct {
	Now func() time.Time // default time.Now
	// Timer starts a timer that fires once after d; stop cancels it (and
	// may be called more than once). Default time.NewTimer.
	Timer func(d time.Duration) (c <-chan time.Time, stop func() bool)
	Rand  func() float64 // uniform in [0,1), for jitter; default math/rand/v2
	// Jitter is the largest random delay added after a Reset or a 429 hold;
	// default DefaultPacerJitter. Negative means none.
	Jitter time.Duration
	// MaxWait caps any single hold (a Reset far away, a huge Retry-After);
	// default DefaultPacerMaxWait.
	MaxWait time.Duration
	// StateFile, when set, keeps the known windows, 429 holds and the
	// route→class map across restarts (see pacerstate.go): loaded by
	// NewPacer, written as responses arrive. The daemon passes
	// <state_dir>/pacer.json.
	StateFile string
	// PersistInterval is how often, at most, ordinary changes are written
	// to StateFile; a spent window or a 429 hold is written at once.
	// Default DefaultPacerPersistInterval; negative writes every change.
	PersistInterval time.Duration
	Logger          zerolog.Logger
	Observer        Observer // RateLimit and RateLimitWait; nil = no-op
}

// Pacer paces API requests of one token. It is safe for concurrent use; give
// every client (and every goroutine) using the same token the same Pacer.
// Storage PUTs are not paced: storage is another host with its own limits.
type Pacer struct {
	now     func() time.Time
	timer   func(time.Duration) (<-chan time.Time, func() bool)
	rand    func() float64
	jitter  time.Duration
	maxWait time.Duration
	log     zerolog.Logger
	obs     Observer
	persist *persister // nil without a state file

	mu      sync.Mutex
	routes  map[string]*routeState
	buckets map[int]*bucket // by X-RateLimit-Limit
	changed chan struct{}   // closed and replaced on every release
	// parked holds the timer stops of the goroutines waiting in Wait. A
	// release stops them all before it wakes their owners, so at every
	// moment a pending timer means a goroutine that is parked and not yet
	// woken (tests drive a fake clock by that count).
	parked map[*parkedWaiter]struct{}
	// lag is the least local now minus Date seen (dateLagLocked).
	lag      time.Duration
	lagKnown bool
}

type parkedWaiter struct{ stop func() bool }

// routeState is what the pacer knows about one route.
type routeState struct {
	name       string
	bucket     *bucket // nil until a response named the route's class
	probing    bool    // class unknown and a probe is in flight
	probeStart time.Time
	probe      *ticket // that probe
}

// bucket is one limit class, or (limit 0) a route that sends no
// rate-limit headers and is only held after a 429.
type bucket struct {
	class      string
	limit      int
	remaining  int       // last reported, min over responses of the same window
	known      bool      // remaining/resetAt describe a current window
	resetRaw   int64     // the server's Reset of that window, epoch seconds
	resetAt    time.Time // local time after which the window counts as renewed
	holdUntil  time.Time // after a 429
	inFlight   int       // reserved and not yet released
	probing    bool      // window unknown (or unconfirmed) and a probe is in flight
	probeStart time.Time
	lastSend   time.Time
	strikes    int // consecutive 429s
	// unconfirmed: the window was loaded from the state file, which may
	// be behind what the previous process spent; until a response of this
	// process names the window, one request at a time.
	unconfirmed bool

	// Sharing accounting of the window resetRaw: own counts our requests
	// the server counted in it (responses that named it, and answers that
	// never came), foreign a lower bound of everyone else's. prevOwn and
	// prevForeign are the same for the window seen before it.
	own, foreign         int
	prevOwn, prevForeign int
	// When others were last seen spending, the least time before a Reset
	// at which they were, and how long before this window's Reset our last
	// answer in it came.
	foreignSeen           time.Time
	foreignLead, lastLook time.Duration
	// The window's roles (share). opener: the server counted our request
	// first in this window (its answer said Remaining limit-1); exactly
	// one client opens each window. firstPos is how many requests the
	// server counted before our first one in it, firstLead how long before
	// Reset that first answer came. landed is when the others' first
	// requests of the window have surely reached the server (clients meet
	// a Reset up to a fifth of the jitter apart), landSpan the time from
	// our first answer to it; sawLanded: an answer to a request sent after
	// it came.
	opener, sawLanded   bool
	firstPos            int
	firstLead, landSpan time.Duration
	landed              time.Time
	rtt                 time.Duration // a slowly decaying maximum of the class's round trips
}

// notSent is the release value of a slot given back unused (a
// Reservation cancelled): unlike nil (no answer), it costs no budget.
var notSent = &http.Response{}

// ticket is one reservation, released exactly once.
type ticket struct {
	route      *routeState
	bucket     *bucket // nil for a class probe
	sent       time.Time
	routeProbe bool
	probe      bool
	// probeBuckets are the known classes a class probe was counted in: it
	// may belong to any of them, so it holds a slot in each until it returns.
	probeBuckets []*bucket
}

// NewPacer returns a Pacer with o's clock, jitter and limits. With a
// StateFile it starts from the windows saved there; a missing file is a
// first start, an unreadable one is logged and ignored.
func NewPacer(o PacerOptions) *Pacer {
	p := &Pacer{
		now:     o.Now,
		timer:   o.Timer,
		rand:    o.Rand,
		jitter:  o.Jitter,
		maxWait: o.MaxWait,
		log:     o.Logger,
		obs:     o.Observer,
		routes:  map[string]*routeState{},
		buckets: map[int]*bucket{},
		changed: make(chan struct{}),
		parked:  map[*parkedWaiter]struct{}{},
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.timer == nil {
		p.timer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	if p.rand == nil {
		p.rand = rand.Float64
	}
	if p.jitter == 0 {
		p.jitter = DefaultPacerJitter
	}
	if p.jitter < 0 {
		p.jitter = 0
	}
	if p.maxWait <= 0 {
		p.maxWait = DefaultPacerMaxWait
	}
	if p.obs == nil {
		p.obs = NopObserver{}
	}
	if o.StateFile != "" {
		interval := o.PersistInterval
		if interval == 0 {
			interval = DefaultPacerPersistInterval
		}
		p.persist = &persister{path: o.StateFile, interval: max(interval, 0), log: p.log, idle: sync.NewCond(&p.mu)}
		p.loadState()
	}
	return p
}

// Wait blocks until route may send one request and returns the function to
// call with that request's response (nil when none came). The release must be
// called exactly once (later calls are ignored); until it is, the request
// counts as in flight. Wait returns ctx's error as soon as ctx is done.
func (p *Pacer) Wait(ctx context.Context, route string) (release func(*http.Response), err error) {
	var start time.Time
	waited, logged := false, false
	for {
		if err := ctx.Err(); err != nil {
			p.recordWait(waited, start)
			return nil, err
		}
		now := p.now()
		p.mu.Lock()
		t, d, why := p.reserveLocked(route, now)
		if t != nil {
			snap := p.snapshotLocked(now, false, false)
			p.mu.Unlock()
			// A reservation that spends a window's last slot is written
			// before the request can leave (see pacerstate.go).
			p.persist.save(p, snap)
			p.recordWait(waited, start)
			var once sync.Once
			return func(resp *http.Response) {
				once.Do(func() { p.release(t, resp) })
			}, nil
		}
		if d <= 0 {
			d = time.Millisecond
		}
		timerC, stop := p.timer(d)
		w := &parkedWaiter{stop: stop}
		p.parked[w] = struct{}{}
		ch := p.changed
		p.mu.Unlock()

		if !waited {
			waited, start = true, now
		}
		if !logged {
			logged = true
			p.log.Debug().Str("route", route).Str("reason", why).Float64("wait_s", d.Seconds()).Msg("pacer holding request")
		}
		select {
		case <-ctx.Done():
		case <-ch:
		case <-timerC:
		}
		p.mu.Lock()
		delete(p.parked, w)
		p.mu.Unlock()
		stop()
	}
}

func (p *Pacer) recordWait(waited bool, start time.Time) {
	if waited {
		if d := p.now().Sub(start); d > 0 {
			p.obs.RateLimitWait(d)
		}
	}
}

// reserveLocked either reserves a slot for route (ticket != nil) or says how
// long to wait before asking again (a release may wake the caller sooner).
func (p *Pacer) reserveLocked(name string, now time.Time) (*ticket, time.Duration, string) {
	rt := p.routes[name]
	if rt == nil {
		rt = &routeState{name: name}
		p.routes[name] = rt
	}
	b := rt.bucket
	if b == nil {
		// Class unknown: one probe at a time. The probe is also held while
		// a known class it may belong to is exhausted or on hold
		// (mayBelongLocked). A probe that never reports (a caller that
		// forgot release) stops blocking the route after maxWait.
		if rt.probing && now.Sub(rt.probeStart) < p.maxWait {
			return nil, rt.probeStart.Add(p.maxWait).Sub(now), "class probe in flight"
		}
		if d := p.exhaustedLocked(now, name); d > 0 {
			return nil, d, "a known class is exhausted"
		}
		t := &ticket{route: rt, routeProbe: true, sent: now}
		rt.probing, rt.probeStart, rt.probe = true, now, t
		// Count the probe in every known window it may belong to
		// (exhaustedLocked made sure each has a slot), or a known route
		// could spend the same last slot while the probe is out and earn
		// a 429.
		for _, kb := range p.buckets {
			if kb.limit > 0 && kb.known && now.Before(kb.resetAt) && p.mayBelongLocked(kb, name) {
				kb.inFlight++ // not lastSend: it belongs to one class at most, and need not pace the others
				t.probeBuckets = append(t.probeBuckets, kb)
			}
		}
		return t, 0, ""
	}
	if now.Before(b.holdUntil) {
		return nil, b.holdUntil.Sub(now), "class on hold after 429"
	}
	t := &ticket{route: rt, bucket: b, sent: now}
	if b.limit == 0 {
		b.inFlight++
		return t, 0, ""
	}
	if !b.known || !now.Before(b.resetAt) {
		if b.probing && now.Sub(b.probeStart) < p.maxWait {
			return nil, b.probeStart.Add(p.maxWait).Sub(now), "window probe in flight"
		}
		b.known, b.unconfirmed = false, false
		b.probing, b.probeStart = true, now
		b.inFlight++
		b.lastSend = now
		t.probe = true
		return t, 0, ""
	}
	avail := b.remaining - b.inFlight
	if avail <= 0 {
		return nil, b.resetAt.Sub(now), "no requests left before reset"
	}
	if b.own == 1 && b.foreign == 0 && now.Before(b.landed) && (b.othersLately(now) || b.careful(avail) != "") {
		// We opened the window: let the first requests of the token's
		// other clients meeting it land before our second, or we would
		// spend it before they are seen (and they would draw the 429s).
		// Always when others were seen lately; alone, in a window small
		// enough to go one request at a time (a strict class), where the
		// wait costs a fraction of a second per window.
		return nil, b.landed.Sub(now), "letting the token's other clients open the window"
	}
	share, sharing := b.share(avail, now)
	if sharing && share <= 0 {
		return nil, b.resetAt.Sub(now), "leaving the rest of the window to other clients of the token"
	}
	if why := b.careful(avail); why != "" && b.inFlight > 0 && now.Sub(b.lastSend) < p.maxWait {
		// Wait for the answer in flight: it tells the window's count as
		// of now, others' sends included. (A request that never reports
		// stops blocking after maxWait.)
		return nil, b.lastSend.Add(p.maxWait).Sub(now), why
	}
	b.inFlight++
	b.lastSend = now
	return t, 0, ""
}

// careful says why b's next request must wait for the answer of the one in
// flight (empty: it need not). Remaining is only as fresh as the last answer:
// other clients of the token may have spent the window since, and requests
// sent together on the same stale count can overrun it. With many slots left
// that cannot happen; for a window's last slots (its last quarter, and at
// least the last carefulSlots: a strict class's whole window), each request
// leaves on a fresh count, so several daemons draining one window interleave
// instead of colliding. The cost is a round trip per request in those slots.
func (b *bucket) careful(avail int) string {
	switch {
	case b.unconfirmed:
		// Remaining may be stale by the requests the previous process
		// sent after its last write, but not to 0 (that is written
		// first): one request is safe, and its answer tells the truth.
		return "confirming a window saved before a restart"
	case avail <= max(carefulSlots, b.limit/4):
		return "one at a time in the window's last slots"
	}
	return ""
}

// carefulSlots: a window's last slots, at least, go one at a time (careful).
const carefulSlots = 10

// share says how many of the avail requests left in b's window are ours to
// take when other clients of the token are spending it too (sharing), and
// nothing (sharing false) when no one else has been seen: then all are.
func (b *bucket) share(avail int, now time.Time) (n int, sharing bool) {
	if b.foreign == 0 && b.prevForeign == 0 {
		return avail, false
	}
	// What the others will still spend this window: what they spent in the
	// last one, less what they have spent of it so far; the first time they
	// show up, as much again as they have spent so far.
	expect := b.foreign
	if b.prevForeign > 0 {
		expect = max(b.prevForeign-b.foreign, 0)
	}
	// How many clients: us, and the others counted in units of our own use
	// (n daemons draining backlogs each spend about what we do), a unit of
	// at least half the window: our use falls as we back off, and that must
	// not make one neighbour look like a crowd.
	others := max(b.foreign, b.prevForeign)
	unit := max(b.own, b.prevOwn, (b.limit+1)/2, 1)
	clients := 1 + (others+unit-1)/unit
	// Ours is what their expected use leaves, but no more than an equal
	// share of the window (what they got last window may be less than they
	// wanted: we may have taken the rest), and never the last slot (a
	// neighbour that spends it between our last header and our request
	// would turn it into our 429).
	fair := b.limit/clients - b.own
	if b.prevForeign > 0 && b.prevOwn+b.prevForeign < b.limit {
		// The last window was not spent: the others had all they wanted
		// of it, so their use is their need, not what we left them (a
		// daemon whose others are finishing takes the slots they no
		// longer want).
		fair = avail
	}
	n = min(avail-expect, fair, avail-1)
	// Each window has one opener, the client the server counted first in
	// it; the others leave it the window's last slot, which it takes once
	// their first requests of the window have landed (daemons draining
	// backlogs meet every Reset together).
	switch {
	case !b.opener && 2*b.firstPos < b.limit:
		// Not the opener (and what came before our first request was
		// the others' first requests, not a neighbour's burst, whose
		// owner does not come back for the last slot): leave two, so
		// that one is left even when two of us take the one before it
		// on the same count.
		n = min(n, avail-2)
	case b.opener && b.sawLanded && b.startSpenders():
		// The opener, on a count from after everyone's first requests
		// (and the others spend only then): what is left, the others
		// have left. All of it is ours.
		n = avail
	case b.opener && !now.Before(b.landed) && (b.startSpenders() || b.own == 1):
		// The opener, once the others' first requests have landed: one
		// request on the old count (the others leave it a slot), whose
		// answer is the fresh count.
		n = max(n, 1)
	}
	return n, true
}

// othersLately says other clients of the token were seen spending within
// foreignMemory.
func (b *bucket) othersLately(now time.Time) bool {
	return !b.foreignSeen.IsZero() && now.Sub(b.foreignSeen) < foreignMemory
}

// startSpenders says the others of the token have only been seen spending
// at the start of windows, as daemons draining backlogs do, not later in
// them than their first requests land.
func (b *bucket) startSpenders() bool {
	return b.foreignLead > 0 && b.foreignLead+2*b.landSpan >= b.firstLead
}

// minLandSpan is the least time, beyond two round trips, that the token's
// other clients' first requests of a window are given to land: their
// Resets differ by our clocks' offsets, known only to Date's second.
const minLandSpan = 100 * time.Millisecond

// foreignMemory is how long a neighbour seen spending the token's windows is
// remembered while windows pass without a sighting that could have seen it.
const foreignMemory = 10 * assumedWindow

// rollWindow starts the sharing accounting of a new window. We see a
// window's foreign use only up to our last answer in it: a window where we
// saw none is evidence that the neighbour has gone only if we looked as late
// in it as the neighbour has been seen spending; then its memory halves,
// else it stays (for foreignMemory at most).
//
// The window's opener is the exception when the others spend at a window's
// start, as daemons draining backlogs do: it cannot look later than they
// spend without taking a slot they may want, and a daemon whose others have
// finished opens every window. So an opener that saw none halves its memory
// all the same: a daemon left alone gets the whole window back within a few
// windows, instead of one slot per window until foreignMemory ends. (If the
// others are still there, the next window's first answers show them again.)
func (b *bucket) rollWindow(now time.Time) {
	prev := max(b.foreign, b.prevForeign/2)
	switch {
	case b.foreign == 0 && b.opener && b.startSpenders():
		// halves (prev), though we could not look late
	case b.foreign == 0 && b.lastLook > b.foreignLead && b.othersLately(now):
		prev = b.prevForeign
	}
	b.opener, b.sawLanded = false, false
	if prev == 0 {
		b.foreignLead = 0
	}
	b.prevOwn, b.prevForeign = b.own, prev
	b.own, b.foreign = 0, 0
}

// exhaustedLocked returns how long until no known class that route may
// belong to is exhausted or on hold (0 when none is).
func (p *Pacer) exhaustedLocked(now time.Time, route string) time.Duration {
	var d time.Duration
	for _, b := range p.buckets {
		if !p.mayBelongLocked(b, route) {
			continue
		}
		var w time.Duration
		switch {
		case now.Before(b.holdUntil):
			w = b.holdUntil.Sub(now)
		case b.known && now.Before(b.resetAt) && b.remaining-b.inFlight <= 0:
			w = b.resetAt.Sub(now)
		}
		if w > 0 && (d == 0 || w < d) {
			d = w
		}
	}
	return d
}

// readRoutes are the routes that only read (GET). The API documents the
// class of one of them, the checkpoint listing: normal; the strict class is
// the one the publishing calls spend.
var readRoutes = map[string]bool{
	RouteGetSplat: true, RouteCheckpoints: true,
	RouteV1Me: true, RouteV1Splats: true, RouteV1GetSplat: true, RouteV1GetUpload: true,
}

// mayBelongLocked says whether route, of unknown class, may be in b's. Any
// route may, except that a read route is taken not to be in a class that
// holds no known read route: a batch's last publishes spend a strict
// window, and a fresh daemon's first poll, right after them, would otherwise
// wait that window out (up to a minute), once per state directory. Wrong,
// the bet costs one 429, once per state directory too: the route's class is
// learned from it and kept in pacer.json.
func (p *Pacer) mayBelongLocked(b *bucket, route string) bool {
	if !readRoutes[route] {
		return true
	}
	for _, rt := range p.routes {
		if rt.bucket == b && readRoutes[rt.name] {
			return true
		}
	}
	return false
}

func (p *Pacer) bucketLocked(limit int) *bucket {
	b := p.buckets[limit]
	if b == nil {
		b = &bucket{class: PacerClass(limit), limit: limit}
		p.buckets[limit] = b
		// Other routes' class probes still out may belong to the new
		// class: they count in its window, as in every known one, or
		// their use would pass for a neighbour's.
		for _, rt := range p.routes {
			if rt.probe != nil {
				b.inFlight++
				rt.probe.probeBuckets = append(rt.probe.probeBuckets, b)
			}
		}
	}
	return b
}

func (p *Pacer) jitterDur() time.Duration {
	if p.jitter <= 0 {
		return 0
	}
	r := p.rand()
	if r < 0 || r >= 1 {
		r = 0
	}
	return time.Duration(r * float64(p.jitter))
}

// dateLagLocked folds one sample of local now minus the server's Date into
// the pacer's estimate of the clocks' offset and returns it. Samples exceed
// the offset by Date's truncation (under a second) and the answer's travel,
// so the smallest is the best; one more than two seconds above it means the
// local clock jumped, and starts the estimate over.
func (p *Pacer) dateLagLocked(sample time.Duration) time.Duration {
	if !p.lagKnown || sample < p.lag || sample > p.lag+2*time.Second {
		p.lag, p.lagKnown = sample, true
	}
	return p.lag
}

// windowHeaders is what a response says about the rate limit.
type windowHeaders struct {
	limit        int
	remaining    int
	hasRemaining bool
	resetRaw     int64         // server epoch seconds, 0 if absent
	resetIn      time.Duration // Reset minus the server's now (Date), or minus local now
	dateLag      time.Duration // local now minus Date, when the response had one
	hasDate      bool
	hasReset     bool
	retryAfter   time.Duration
}

func parseHeaders(h http.Header, now time.Time) windowHeaders {
	var r windowHeaders
	if v, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Limit"))); err == nil && v > 0 {
		r.limit = v
	}
	if v, err := strconv.Atoi(strings.TrimSpace(h.Get("X-RateLimit-Remaining"))); err == nil {
		r.remaining, r.hasRemaining = max(v, 0), true
	}
	if reset := parseReset(h); !reset.IsZero() {
		ref := now
		if d, err := http.ParseTime(h.Get("Date")); err == nil {
			ref, r.dateLag, r.hasDate = d, now.Sub(d), true
		}
		r.resetRaw, r.resetIn, r.hasReset = reset.Unix(), reset.Sub(ref), true
	}
	r.retryAfter = parseRetryAfter(h, now)
	return r
}

// release reconciles a reservation with the response's headers.
func (p *Pacer) release(t *ticket, resp *http.Response) {
	now := p.now()
	p.mu.Lock()
	hold := p.releaseLocked(t, resp, now)
	snap := p.snapshotLocked(now, hold, true)
	// Stop the parked goroutines' timers before waking them: a pending
	// timer always means a goroutine still parked.
	for w := range p.parked {
		w.stop()
		delete(p.parked, w)
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	p.persist.save(p, snap)
}

// releaseLocked folds one answer into the pacer's state; true when it put a
// class on hold (a 429).
func (p *Pacer) releaseLocked(t *ticket, resp *http.Response, now time.Time) bool {
	rt := t.route
	if t.routeProbe {
		rt.probing, rt.probe = false, nil
		for _, kb := range t.probeBuckets {
			kb.inFlight--
		}
	}
	if b := t.bucket; b != nil {
		b.inFlight--
		if t.probe {
			b.probing = false
		}
	}
	if resp == notSent {
		return false // the slot was reserved and given back unused: nothing to count
	}
	if resp == nil {
		// No answer: the request may or may not have been counted; assume
		// it was.
		if b := t.bucket; b != nil && b.known && b.remaining > 0 {
			b.remaining--
			b.own++
		}
		return false
	}

	h := parseHeaders(resp.Header, now)
	if h.hasDate && h.hasReset {
		// Date is whole seconds, so now - Date overstates the clocks'
		// offset by up to a second; the smallest lag seen is the closest.
		h.resetIn -= h.dateLag - p.dateLagLocked(h.dateLag)
	}
	b := rt.bucket
	switch {
	case h.limit > 0:
		nb := p.bucketLocked(h.limit)
		if b != nb {
			p.log.Debug().Str("route", rt.name).Str("class", nb.class).Int("limit", h.limit).Msg("pacer learned rate-limit class")
			rt.bucket = nb
		}
		b = nb
	case b == nil:
		// The route sends no rate-limit headers: let it run, holding it
		// only after a 429. Such a bucket is private to the route.
		b = &bucket{class: "route_" + rt.name}
		rt.bucket = b
	}

	limited := resp.StatusCode == http.StatusTooManyRequests
	if b.limit > 0 && h.hasRemaining {
		if d := now.Sub(t.sent); d > 0 {
			b.rtt = max(d, b.rtt-b.rtt/8)
		}
		p.updateWindowLocked(b, h, !limited, t.sent, now)
		p.obs.RateLimit(b.class, h.remaining)
	}
	if limited {
		p.holdLocked(rt, b, h, now)
		return true
	}
	if resp.StatusCode < 400 {
		b.strikes = 0
	}
	return false
}

// updateWindowLocked folds a response's Remaining/Reset into b. Responses can
// arrive out of order: within one window the lowest Remaining wins, and a
// response from an older window is ignored. counted says the server charged
// the request (it was not refused with a 429).
func (p *Pacer) updateWindowLocked(b *bucket, h windowHeaders, counted bool, sent, now time.Time) {
	if h.hasReset && b.resetRaw != 0 && h.resetRaw < b.resetRaw {
		return
	}
	confirming := b.unconfirmed
	b.unconfirmed = false
	sameWindow := h.hasReset && h.resetRaw == b.resetRaw
	if h.hasReset {
		// Sharing accounting needs to know which window a response
		// belongs to; without Reset it is not kept (and nobody is
		// assumed to share the token).
		if !sameWindow {
			b.rollWindow(now)
			b.landSpan = max(p.jitter/5, minLandSpan) + 2*b.rtt
			b.landed, b.firstLead = now.Add(b.landSpan), h.resetIn
			b.firstPos = 0
			if counted {
				b.firstPos = b.limit - 1 - h.remaining
			}
		}
		// Everything the window used that is not ours is someone else's.
		// Our requests in flight may or may not be among the used, so they
		// count as ours: foreign is a lower bound. A 429 was not counted,
		// but says the window is spent: by others, beyond our own.
		if counted {
			b.own++
			b.lastLook = h.resetIn
			if h.remaining == b.limit-1 {
				b.opener = true
			}
			if !sent.Before(b.landed) {
				b.sawLanded = true
			}
		}
		f := b.limit - h.remaining - b.own - b.inFlight
		if counted && confirming && sameWindow && f > b.foreign {
			// The first answer to a window saved before a restart:
			// what the file did not show is most likely the previous
			// process's last requests, written behind and lost.
			b.own += f - b.foreign
			f = b.foreign
		}
		if f > b.foreign {
			b.foreign, b.foreignSeen = f, now
			if b.foreignLead == 0 || h.resetIn < b.foreignLead {
				b.foreignLead = h.resetIn
			}
		}
	}
	if sameWindow && b.known {
		b.remaining = min(b.remaining, h.remaining)
		return
	}
	in := assumedWindow
	if h.hasReset {
		in = h.resetIn
	}
	if in > p.maxWait {
		p.log.Warn().Str("class", b.class).Float64("reset_in_s", in.Seconds()).Float64("capped_to_s", p.maxWait.Seconds()).
			Msg("rate-limit reset is further away than a window can be; capping the wait (clock skew or server error)")
		in = p.maxWait
	}
	b.remaining = h.remaining
	b.resetRaw = h.resetRaw
	if in <= 0 {
		// Reset is already past by the server's clock: the window has
		// renewed. The next request probes the new one.
		b.known = false
		return
	}
	// A fifth of the jitter at a window change (after a 429 too): enough
	// to keep several machines on one token from firing at the same
	// instant, small enough not to waste a second of every window (11
	// windows of a strict class would otherwise lose about 5 s). The full
	// jitter applies to a 429 without a known Reset (holdLocked).
	b.resetAt = now.Add(in + p.jitterDur()/5)
	b.known = true
}

// holdLocked holds b after a 429 until the later of its Reset and the
// response's Retry-After, plus jitter, capped at maxWait plus jitter.
func (p *Pacer) holdLocked(rt *routeState, b *bucket, h windowHeaders, now time.Time) {
	b.strikes++
	b.remaining = 0
	jit := p.jitterDur()
	until := now
	if b.known && b.resetAt.After(until) {
		// Back at the Reset with the window's own fifth of the jitter,
		// like every other client of the token: a daemon that came back
		// later would find the window spent again by whoever did not.
		until = b.resetAt
	}
	// Retry-After counts whole seconds: one that ends within a second of a
	// known Reset is that Reset rounded up, and waiting it out (with the
	// full jitter) would bring us back after the others of the token, to a
	// window they have spent again. A longer one is the server asking for
	// more than the window, and is honoured.
	if ra := now.Add(h.retryAfter); h.retryAfter > 0 && ra.After(until.Add(time.Second)) {
		until = ra.Add(jit)
	}
	if !until.After(now) {
		back := pacer429Fallback
		for i := 1; i < b.strikes && back < p.maxWait; i++ {
			back *= 2
		}
		until = now.Add(min(back, p.maxWait) + jit)
	}
	if limit := now.Add(p.maxWait + jit); until.After(limit) {
		p.log.Warn().Str("class", b.class).Float64("wanted_s", until.Sub(now).Seconds()).Float64("capped_to_s", p.maxWait.Seconds()).
			Msg("rate-limit hold capped")
		until = limit
	}
	if until.After(b.holdUntil) {
		b.holdUntil = until
	}
	p.log.Warn().Str("route", rt.name).Str("class", b.class).Float64("hold_s", b.holdUntil.Sub(now).Seconds()).
		Int("strikes", b.strikes).Msg("rate limited (HTTP 429); holding the class")
}

// ClassState is the pacer's view of one limit class, for status pages.
type ClassState struct {
	Class     string
	Limit     int
	Remaining int       // as last reported, less the requests in flight
	Reset     time.Time // zero when no current window is known
	Held      bool      // held after a 429 until Reset or Retry-After
	Waiting   int       // requests of this class in flight
	Others    int       // requests other clients of the token spent in this window (a lower bound)
}

// Classes returns the known limit classes, in name order.
func (p *Pacer) Classes() []ClassState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make([]ClassState, 0, len(p.buckets))
	for _, b := range p.buckets {
		if b.limit == 0 {
			continue // routes that send no rate-limit headers
		}
		cs := ClassState{Class: b.class, Limit: b.limit, Remaining: b.limit, Waiting: b.inFlight, Others: b.foreign}
		if b.known {
			cs.Remaining, cs.Reset = max(b.remaining-b.inFlight, 0), b.resetAt
		}
		cs.Held = now.Before(b.holdUntil)
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b ClassState) int { return strings.Compare(a.Class, b.Class) })
	return out
}
