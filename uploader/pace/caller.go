package pace

import (
	"context"
	"time"
)

// Delay says why the pacer delays a request: the class's label ("unknown"
// before its route's first answer), the reason, and when it ends (zero: at
// the answer of a request in flight).
type Delay struct {
	Class, Reason string
	Until         time.Time
}

// Parked is the error of a Caller's request whose delay ends past the park
// bound; the request was not sent.
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

// Caller returns a Caller of key that parks on a delay ending more than park
// away (0: never).
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
