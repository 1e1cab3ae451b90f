package pace

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestCallerParks: a Caller's request whose delay ends later than its park
// bound returns *Parked at once, unsent, and shows in no delay. A delay
// within the bound, or without one, waits.
func TestCallerParks(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 10, 0, t0.Add(30*time.Second), t0, 0)) // spent

	c := p.Caller(3, 10*time.Second)
	_, err := c.Wait(context.Background(), routePublish, false)
	pk, ok := errors.AsType[*Parked](err)
	if !ok || pk.Class != "strict" || !pk.Until.Equal(t0.Add(30*time.Second)) {
		t.Fatalf("Wait = %v, want parked on the strict window until its Reset", err)
	}
	if n := clk.pending(); n != 0 {
		t.Errorf("%d requests wait in the pacer, want none: a parked request returns", n)
	}
	if d := p.Delays(); len(d) != 0 {
		t.Errorf("a parked request shows as delayed: %+v", d)
	}
	if _, err := c.Wait(context.Background(), routePublish, false); !errors.As(err, &pk) {
		t.Fatalf("Wait = %v, want parked", err)
	}

	clk.Advance(25 * time.Second) // 5 s left: within the bound
	for _, w := range []waiter{c, p.Caller(4, 0)} {
		delayed := waitAsync(context.Background(), w, routePublish)
		clk.awaitParked(t, 1)
		clk.Advance(5 * time.Second)
		receive(t, delayed).release(windowResp(200, 10, 0, clk.Now().Add(5*time.Second), clk.Now(), 0))
	}
}

// TestCallerReservation: a reserved slot goes to the Caller's next request
// of its route without a wait; given back unused (the file changed, a
// shutdown) it is released once, as NotSent, which costs the window nothing.
func TestCallerReservation(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	p := newTestPacer(t, clk, Options{Jitter: -1})
	t0 := clk.Now()
	mustWait(t, p, routePublish)(windowResp(200, 10, 9, t0.Add(30*time.Second), t0, 0))

	c := p.Caller(1, 0)
	if err := c.Reserve(context.Background(), routePublish, false); err != nil {
		t.Fatal(err)
	}
	if n := inFlight(p, 10); n != 1 {
		t.Fatalf("in flight %d with a slot reserved, want 1", n)
	}
	c.Unreserve()
	c.Unreserve()
	if cs := p.Classes(); inFlight(p, 10) != 0 || cs[0].Remaining != 9 {
		t.Errorf("after Unreserve: %+v, want nothing in flight and the 9 left", cs[0])
	}

	if err := c.Reserve(context.Background(), routePublish, false); err != nil {
		t.Fatal(err)
	}
	rel, err := c.Wait(context.Background(), routePublish, false)
	if err != nil {
		t.Fatalf("the reserved slot's request: %v", err)
	}
	if cs := p.Classes(); inFlight(p, 10) != 1 || clk.askedCount() != 0 {
		t.Errorf("%+v, %d timers: want the reserved slot alone in flight, no wait", cs[0], clk.askedCount())
	}
	rel(windowResp(200, 10, 8, t0.Add(30*time.Second), t0, 0))
	c.Unreserve() // used: a no-op
	if cs := p.Classes(); inFlight(p, 10) != 0 || cs[0].Remaining != 8 {
		t.Errorf("after the answer: %+v, want nothing in flight and 8 left", cs[0])
	}
}

// inFlight is the number of requests of the class of limit sent and not yet answered.
func inFlight(p *Pacer, limit int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.classes[limit].inFlight
}
