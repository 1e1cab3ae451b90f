package pace

import (
	"context"
	"time"
)

// Delay says why the pacer delays a request: the class's label ("unknown"
// before its route's first answer), the reason, and when it ends (zero: at
// the answer of a request in flight).
type Delay struct {
	Class  string
	Reason string
	Until  time.Time
}

// Parked is the error of a Caller's Wait whose delay would end later than
// the Caller's park bound; the request was not sent.
type Parked struct{ Delay }

func (e *Parked) Error() string {
	return "rate limit " + e.Class + ": " + e.Reason + " (request not sent; the job is parked)"
}

// Caller is one job's use of the Pacer, from its claim to its release; one
// goroutine at a time uses it. Its delays show in Pacer.Delays by its key.
type Caller struct {
	p     *Pacer
	key   uint64
	park  time.Duration // a delay ending further away parks the Caller; 0: none does
	*turn               // shared with the Caller's Blocking view
}

type turn struct {
	parked   *Delay        // the delay that parked the Caller: every later Wait returns it
	route    string        // the reserved slot's route
	reserved func(*Answer) // the reserved slot's release; nil: none
}

// Caller returns the Caller of key whose delays ending more than park away
// park it (0: none do); the key's earlier park ends.
func (p *Pacer) Caller(key uint64, park time.Duration) *Caller {
	p.mu.Lock()
	delete(p.parks, key)
	p.mu.Unlock()
	return &Caller{p: p, key: key, park: park, turn: &turn{}}
}

// Blocking returns c's view that waits out every delay: for requests made
// while others of c's job are in flight.
func (c *Caller) Blocking() *Caller {
	b := *c
	b.park = 0
	return &b
}

// Wait is Pacer.Wait for c: c's reserved slot of route goes at once, and a
// delay longer than c's park bound returns *Parked.
func (c *Caller) Wait(ctx context.Context, route string, read bool) (func(*Answer), error) {
	if rel := c.take(route); rel != nil {
		return rel, nil
	}
	return c.p.wait(ctx, route, read, c)
}

// Reserve waits as Wait does and keeps the slot for c's next request of
// route, which then leaves at once.
func (c *Caller) Reserve(ctx context.Context, route string, read bool) error {
	rel, err := c.p.wait(ctx, route, read, c)
	if err != nil {
		return err
	}
	c.Unreserve() // a stale one, never expected
	c.route, c.reserved = route, rel
	return nil
}

// Unreserve gives c's reserved slot back unused; a no-op without one.
func (c *Caller) Unreserve() {
	if rel := c.take(c.route); rel != nil {
		rel(NotSent)
	}
}

func (c *Caller) take(route string) func(*Answer) {
	rel := c.reserved
	if rel == nil || c.route != route {
		return nil
	}
	c.reserved = nil
	return rel
}

// Parked returns the delay that parked c since the last call, if one did;
// until then every Wait of c returns *Parked at once.
func (c *Caller) Parked() (Delay, bool) {
	d := c.parked
	if d == nil {
		return Delay{}, false
	}
	c.parked = nil
	return *d, true
}

// delayed records that c's request waits for dl (zero: no longer waits), or
// returns *Parked when dl ends more than c.park after now. Called with p.mu
// held.
func (c *Caller) delayed(dl Delay, now time.Time) error {
	switch {
	case c == nil:
	case dl == Delay{}:
		delete(c.p.delays, c.key)
	case c.park > 0 && !dl.Until.IsZero() && dl.Until.Sub(now) > c.park:
		c.parked, c.p.parks[c.key] = &dl, dl
		delete(c.p.delays, c.key)
		return &Parked{dl}
	default:
		c.p.delays[c.key] = dl
	}
	return nil
}
