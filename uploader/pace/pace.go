// Package pace keeps the API requests of one token within the server's rate
// limits; docs/architecture.md ("Pacing") gives the model. Per limit class:
//
//	field      changed by                                         meaning
//	limit      the class's first answer (X-RateLimit-Limit)       names the class
//	remaining  an answer of the window: the least; 0 at a 429     the server's count
//	reset      an answer naming a later window                    its X-RateLimit-Reset (server epoch s)
//	resetAt    that answer (our clock, + jitter); a Retry-After   when the window renews here; zero: unknown
//	inFlight   +1 at admission, −1 at the answer                  ours, in no count yet
//	own        +1 per counted answer or per request without one   our use of the window
//	others     limit − remaining − own − inFlight if more; a 429  the token's other clients' use (a lower bound)
//	expect     the window's end (share.go)                        the others' expected use per window
//	peers      the most others' requests between two answers      the others in flight; sets the fair share
//	late       the first sighting of others in a window           how long before Reset they show
//	quiet      the window's end: +1, 1 after others; 0 when late  windows without them; 0: seen late enough
package pace

import (
	"cmp"
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// ClassName labels a limit class: "strict" (≤ 10), "normal" (120, 240), else "limit_<limit>".
func ClassName(limit int) string {
	switch {
	case limit <= 10:
		return "strict"
	case limit == 120 || limit == 240:
		return "normal"
	}
	return "limit_" + strconv.Itoa(limit)
}

const (
	DefaultJitter  = 200 * time.Millisecond
	DefaultMaxWait = 2 * time.Minute
	assumedWindow  = time.Minute // the window of an answer with Remaining but no Reset
	carefulSlots   = 10          // a window's last slots, at least, go one at a time
	quietWindows   = 10          // after this many windows without others, expect halves
	fileVersion    = 2           // pacer.json's layout; version 1 loads without 429 waits
)

// Options configures a Pacer; every field is optional.
type Options struct {
	Now       func() time.Time
	Timer     func(d time.Duration) (c <-chan time.Time, stop func() bool) // default time.NewTimer
	Rand      func() float64                                               // uniform in [0,1)
	Jitter    time.Duration                                                // most added to a Reset or Retry-After; 0: default, < 0: none
	MaxWait   time.Duration                                                // caps any wait; 0: DefaultMaxWait
	StateFile string                                                       // keeps windows and routes across restarts (file.go)
	Logger    zerolog.Logger
	Waited    func(d time.Duration) // how long a request was delayed
	Clients   func() int            // the token's clients with work left, this one among them; 0: unknown
}

// Answer is what one response's headers said of the rate limit.
type Answer struct {
	Status     int           // the HTTP status: a 429 says the window is spent
	Limit      int           // X-RateLimit-Limit; 0: absent
	Remaining  int           // X-RateLimit-Remaining; negative: absent
	Reset      time.Time     // X-RateLimit-Reset; zero: absent
	Date       time.Time     // the server's clock (Date); zero: absent
	RetryAfter time.Duration // Retry-After; 0: absent
}

// NotSent releases a slot given back unused: unlike nil (no answer) it costs no budget.
var NotSent = &Answer{}

// Pacer paces the API requests of one token, for all its clients; safe for concurrent use.
type Pacer struct {
	o        Options    // with the defaults filled in
	saveMu   sync.Mutex // one write of the state file at a time; taken before mu
	failing  bool       // under saveMu: the last write failed (logged once)
	mu       sync.Mutex
	classes  map[int]*class           // by limit
	routes   map[string]*class        // route → class, once an answer named it
	probes   map[string]bool          // routes of unknown class whose probe is out
	reads    map[string]bool          // routes Wait was told only read
	changed  chan struct{}            // closed and replaced at every answer
	sleepers map[*func() bool]sleeper // each delayed request, by its timer's stop
	lag      time.Duration            // the least local now − Date seen
}

// New returns a Pacer; with a StateFile it starts from the saved windows.
func New(o Options) *Pacer {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Timer == nil {
		o.Timer = func(d time.Duration) (<-chan time.Time, func() bool) { t := time.NewTimer(d); return t.C, t.Stop }
	}
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.Clients == nil {
		o.Clients = func() int { return 0 }
	}
	o.Jitter = max(cmp.Or(o.Jitter, DefaultJitter), 0)
	o.MaxWait = cmp.Or(max(o.MaxWait, 0), DefaultMaxWait)
	p := &Pacer{o: o, classes: map[int]*class{}, routes: map[string]*class{}, probes: map[string]bool{},
		reads: map[string]bool{}, changed: make(chan struct{}), sleepers: map[*func() bool]sleeper{}, lag: math.MaxInt64}
	p.load()
	return p
}

// Delay says why a request waits: its class's label ("unknown" before the route's
// first answer), the reason, and when it ends (zero: at an answer in flight).
type Delay struct {
	Class, Reason string
	Until         time.Time
}

// Parked is the error of a Caller's request not sent: its delay ends past the park bound.
type Parked struct{ Delay }

func (e *Parked) Error() string {
	return "rate limit " + e.Class + ": " + e.Reason + " (request not sent; the job is parked)"
}

// Caller is one job's use of the Pacer, keyed by its id; one goroutine uses it.
type Caller struct {
	p        *Pacer
	key      uint64
	park     time.Duration // a delay ending further away parks the Caller; 0: none does
	route    string        // the reserved slot's route
	reserved func(*Answer) // the reserved slot's release; nil: none
}

// Caller returns a Caller of key that parks on a delay ending over park away (0: never).
func (p *Pacer) Caller(key uint64, park time.Duration) *Caller {
	return &Caller{p: p, key: key, park: park}
}

// Wait is Pacer.Wait for c: a slot c reserved for route goes at once.
func (c *Caller) Wait(ctx context.Context, route string, read bool) (func(*Answer), error) {
	if rel := c.reserved; rel != nil && c.route == route {
		c.reserved = nil
		return rel, nil
	}
	return c.p.wait(ctx, route, read, c)
}

// Reserve waits as Wait does and keeps the slot for c's next Wait of route.
func (c *Caller) Reserve(ctx context.Context, route string, read bool) (err error) {
	c.Unreserve() // a stale one, never expected
	c.route = route
	c.reserved, err = c.p.wait(ctx, route, read, c)
	return err
}

// Unreserve gives c's reserved slot back unused; a no-op without one.
func (c *Caller) Unreserve() {
	if c.reserved != nil {
		c.reserved(NotSent)
		c.reserved = nil
	}
}
