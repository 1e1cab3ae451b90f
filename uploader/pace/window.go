package pace

import (
	"context"
	"slices"
	"sync"
	"time"
)

// class is one limit class and its window (package doc); limit 0: no headers.
type class struct {
	limit, remaining, inFlight, own int
	reset                           int64
	resetAt                         time.Time
	share
}

// sleeper is a delayed request: its class (nil: unknown), Caller (nil: none), delay.
type sleeper struct {
	in *class
	by *Caller
	d  Delay
}

// Wait blocks until route (read: it only reads) may send; call the release once with the answer.
func (p *Pacer) Wait(ctx context.Context, route string, read bool) (release func(*Answer), err error) {
	return p.wait(ctx, route, read, nil)
}

// wait is Wait for c (nil: no Caller).
func (p *Pacer) wait(ctx context.Context, route string, read bool, c *Caller) (func(*Answer), error) {
	shown, since := "", p.o.Now() // the reason last logged; when the wait began
	defer func() {
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
		in, d := p.admit(route, read, now)
		if d.Reason == "" {
			spent := p.spent(now, in)
			p.mu.Unlock()
			if spent {
				_ = p.Flush() // a failure is logged
			}
			var once sync.Once
			return func(a *Answer) { once.Do(func() { p.release(route, in, a) }) }, nil
		}
		if c != nil && c.park > 0 && d.Until.Sub(now) > c.park {
			p.mu.Unlock()
			return nil, &Parked{d}
		}
		timer := p.o.MaxWait // until an answer; the cap is a guard
		if !d.Until.IsZero() {
			timer = max(d.Until.Sub(now), time.Millisecond)
		}
		ch, stop := p.o.Timer(timer)
		p.sleepers[&stop] = sleeper{p.routes[route], c, d}
		changed := p.changed
		p.mu.Unlock()
		if d.Reason != shown {
			shown = d.Reason
			p.o.Logger.Debug().Str("route", route).Str("reason", d.Reason).Time("until", d.Until).Msg("pacer delaying request")
		}
		select {
		case <-ctx.Done():
		case <-changed:
		case <-ch:
		}
		p.mu.Lock()
		delete(p.sleepers, &stop)
		p.mu.Unlock()
		stop()
	}
	return nil, ctx.Err()
}

// admit takes a slot for route in the classes it returns, or returns the delay.
func (p *Pacer) admit(route string, read bool, now time.Time) ([]*class, Delay) {
	c := p.routes[route]
	in, d := []*class{c}, Delay{Class: "unknown"}
	if c != nil && c.limit > 0 {
		d.Class = ClassName(c.limit)
	}
	switch {
	case c == nil && p.probes[route]:
		d.Reason = "waiting for the answer of the route's first request, which names its class"
	case c == nil:
		var spent time.Duration
		if in, spent = p.probeClasses(read, now); spent > 0 {
			d.Until, d.Reason = now.Add(spent), "a class the route may be in has nothing left"
		} else {
			p.probes[route] = true
		}
	case c.blocked(now) > 0:
		d.Until, d.Reason = now.Add(c.blocked(now)), "no request left in the window"
	case c.limit == 0 || !c.current(now) && c.inFlight == 0:
	case !c.current(now):
		d.Reason = "a new window: waiting for the answer of its first request"
	case c.remaining-c.inFlight-c.keep(c.limit, c.remaining-c.inFlight, c.own+c.inFlight, p.o.Clients()) <= 0:
		d.Until, d.Reason = now.Add(c.resetAt.Sub(now)), "leaving the rest of the window to the token's other clients"
	case c.inFlight > 0 && c.remaining-c.inFlight <= max(carefulSlots, c.limit/4):
		d.Reason = "the window's last requests go one at a time; waiting for the one in flight"
	}
	if d.Reason != "" {
		return nil, d
	}
	for _, c := range in {
		c.inFlight++
	}
	return in, d
}

// probeClasses returns the classes a route of unknown class may be in and how long one is spent.
func (p *Pacer) probeClasses(read bool, now time.Time) (in []*class, wait time.Duration) {
	readIn := map[*class]bool{}
	for name, c := range p.routes {
		readIn[c] = readIn[c] || p.reads[name]
	}
	for _, c := range p.classes {
		if d := c.blocked(now); (!read || readIn[c]) && d > 0 && (wait == 0 || d < wait) {
			wait = d
		}
		if (!read || readIn[c]) && c.current(now) {
			in = append(in, c)
		}
	}
	return in, wait
}

// current says c's window is known and not over.
func (c *class) current(now time.Time) bool { return !c.resetAt.IsZero() && now.Before(c.resetAt) }

// blocked returns how long c admits nothing: its window is spent.
func (c *class) blocked(now time.Time) time.Duration {
	if c.current(now) && c.remaining-c.inFlight <= 0 {
		return c.resetAt.Sub(now)
	}
	return 0
}

func (p *Pacer) classOf(limit int) *class {
	if p.classes[limit] == nil {
		p.classes[limit] = &class{limit: limit, share: share{quiet: 1}}
	}
	return p.classes[limit]
}

// release folds an answer into the state and wakes the waiting requests.
func (p *Pacer) release(route string, in []*class, a *Answer) {
	now := p.o.Now()
	p.mu.Lock()
	learned := p.settle(route, in, a, now)
	write := learned || p.spent(now, append(in, p.routes[route]))
	for stop := range p.sleepers {
		(*stop)() // a pending timer is always a waiting request
	}
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	if write {
		_ = p.Flush() // a failure is logged
	}
}

// settle folds a into the state; learned: a restart must know what it said.
func (p *Pacer) settle(route string, in []*class, a *Answer, now time.Time) (learned bool) {
	for _, c := range in {
		c.inFlight--
	}
	delete(p.probes, route)
	c := p.routes[route]                                           // nil: a probe
	if a == nil && c != nil && c.current(now) && c.remaining > 0 { // no answer: assume it was counted
		c.remaining, c.own = c.remaining-1, c.own+1
	}
	if a == nil || a == NotSent {
		return false
	}
	if a.Limit > 0 && (c == nil || c.limit != a.Limit) {
		p.o.Logger.Debug().Str("route", route).Str("class", ClassName(a.Limit)).Int("limit", a.Limit).Msg("pacer learned rate-limit class")
		c, learned = p.classOf(a.Limit), true
	} else if c == nil {
		c = &class{} // no headers: delayed only by a Retry-After
	}
	p.routes[route] = c
	if c.limit > 0 && a.Remaining >= 0 {
		learned = p.observe(c, a, now) || learned
	}
	if a.Status == 429 {
		p.limited(route, c, a.RetryAfter, now)
	}
	return learned
}

// observe folds a's count into c; true: a new window.
func (p *Pacer) observe(c *class, a *Answer, now time.Time) bool {
	in, raw, counted := assumedWindow, int64(0), a.Status != 429
	if !a.Reset.IsZero() {
		raw, in = a.Reset.Unix(), a.Reset.Sub(now)
		if lag := now.Sub(a.Date); !a.Date.IsZero() {
			if lag < p.lag || lag-2*time.Second > p.lag { // the least lag, or a clock jump
				p.lag = lag
			}
			in += p.lag // Reset on our clock
		}
		if raw < c.reset {
			return false // an older window's answer
		}
		same := raw == c.reset
		if !same {
			c.end(c.limit)
			c.own = 0
		}
		looked := c.own > 0
		if counted {
			c.own++
		}
		f := c.limit - a.Remaining - c.own - c.inFlight // the others' use this count shows
		c.sawPeers(f, looked)
		if counted && same && c.resetAt.IsZero() && f > c.others {
			c.own += f - c.others // a loaded window's first count: the rest is the last process's
		} else {
			c.sawOthers(f, in)
		}
		if counted && in <= c.late+p.o.Jitter {
			c.quiet = 0 // we looked as late as they showed
		}
		if same && c.current(now) {
			c.remaining = min(c.remaining, a.Remaining)
			return false
		}
	}
	c.remaining, c.reset, c.resetAt = a.Remaining, raw, time.Time{}
	if in > 0 { // else the window has renewed by the server's clock
		c.resetAt = p.renewal(c, in, now)
	}
	return raw != 0
}

// renewal returns when c's window, ending in from now, renews here: capped, plus jitter.
func (p *Pacer) renewal(c *class, in time.Duration, now time.Time) time.Time {
	if in > p.o.MaxWait {
		p.o.Logger.Warn().Str("class", ClassName(c.limit)).Float64("wanted_s", in.Seconds()).Msg("rate-limit wait beyond max wait; capping the wait")
		in = p.o.MaxWait
	}
	return now.Add(in + time.Duration(p.o.Rand()*float64(p.o.Jitter)))
}

// limited spends c's window, until a 429's Retry-After if it ends later.
func (p *Pacer) limited(route string, c *class, retryAfter time.Duration, now time.Time) {
	if c.current(now) {
		c.remaining = 0
		c.sawOthers(c.limit-c.own-c.inFlight, c.resetAt.Sub(now))
	}
	if retryAfter > 0 && (!c.current(now) || now.Add(retryAfter).After(c.resetAt.Add(time.Second))) {
		c.remaining, c.resetAt = 0, p.renewal(c, retryAfter, now)
	}
	p.o.Logger.Warn().Str("route", route).Str("class", ClassName(c.limit)).Float64("spent_s", c.blocked(now).Seconds()).
		Msg("rate limited (HTTP 429); the retry rule decides when to try again")
}

// ClassState is the pacer's view of one limit class, for status pages.
type ClassState struct {
	Limit     int       // X-RateLimit-Limit; ClassName labels it
	Remaining int       // as last reported, less the requests in flight
	Reset     time.Time // zero when no current window is known
	Waiting   int       // requests of this class delayed now
}

// Classes returns the known limit classes, by limit.
func (p *Pacer) Classes() []ClassState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now, waiting := p.o.Now(), map[*class]int{}
	for _, s := range p.sleepers {
		waiting[s.in]++
	}
	out := make([]ClassState, 0, len(p.classes))
	for _, c := range p.classes {
		cs := ClassState{Limit: c.limit, Remaining: c.limit, Waiting: waiting[c]}
		if c.current(now) {
			cs.Remaining, cs.Reset = max(c.remaining-c.inFlight, 0), c.resetAt
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b ClassState) int { return a.Limit - b.Limit })
	return out
}

// Delays returns why each Caller's request is delayed now, by key.
func (p *Pacer) Delays() map[uint64]Delay {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[uint64]Delay{}
	for _, s := range p.sleepers {
		if s.by != nil {
			out[s.by.key] = s.d
		}
	}
	return out
}
