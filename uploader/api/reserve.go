package api

import (
	"context"
	"sync"

	"github.com/splatd/splatd/uploader/pace"
)

// Reservation is a rate-limit slot taken ahead of the call that will use
// it. The worker takes one before it commits a publish intent, so that the
// intent, and with it the "outcome unknown" window of a crash, starts only
// when the request can leave at once, not while it waits in the pacer.
type Reservation struct {
	route   string
	once    sync.Once
	release func(*pace.Answer)
}

// Reserve waits until the pacer admits one call of route and holds that
// admission. Pass it to the call with WithReservation; Cancel gives it back
// unused (a no-op once used).
func (c *Client) Reserve(ctx context.Context, route string) (*Reservation, error) {
	release, err := c.pacer.Wait(ctx, route, readRoutes[route])
	if err != nil {
		return nil, err
	}
	return &Reservation{route: route, release: release}, nil
}

// Cancel releases an unused reservation.
func (r *Reservation) Cancel() {
	if r == nil {
		return
	}
	r.once.Do(func() { r.release(pace.NotSent) })
}

// take hands the slot to the call that uses it; false if already used or
// cancelled, or reserved for another route.
func (r *Reservation) take(route string) (func(*pace.Answer), bool) {
	if r == nil || r.route != route {
		return nil, false
	}
	var rel func(*pace.Answer)
	r.once.Do(func() { rel = r.release })
	return rel, rel != nil
}

type reservationKey struct{}

// WithReservation makes the next API call of the reservation's route made
// with the returned context use the reserved slot instead of waiting.
func WithReservation(ctx context.Context, r *Reservation) context.Context {
	return context.WithValue(ctx, reservationKey{}, r)
}

// reserved returns the slot reserved for route in ctx, if any.
func reserved(ctx context.Context, route string) (func(*pace.Answer), bool) {
	r, _ := ctx.Value(reservationKey{}).(*Reservation)
	return r.take(route)
}
