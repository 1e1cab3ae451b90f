package pace

import (
	"cmp"
	"maps"
	"slices"
	"time"
)

// ClassState is the pacer's view of one limit class, for status pages.
type ClassState struct {
	Class     string
	Limit     int
	Remaining int       // as last reported, less the requests in flight
	Reset     time.Time // zero when no current window is known
	Spent     bool      // nothing may leave until Reset
	Waiting   int       // requests of this class delayed now
	InFlight  int       // requests of this class sent and not yet answered
	Others    int       // the token's other clients' use of this window (a lower bound)
}

// Classes returns the known limit classes, in name order.
func (p *Pacer) Classes() []ClassState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.o.Now()
	waiting := map[int]int{} // by limit
	for _, limit := range p.sleepers {
		waiting[limit]++
	}
	out := make([]ClassState, 0, len(p.classes))
	for _, c := range p.classes {
		cs := ClassState{Class: ClassName(c.limit), Limit: c.limit, Remaining: c.limit, Spent: c.blocked(now) > 0,
			Waiting: waiting[c.limit], InFlight: c.inFlight, Others: c.others}
		if c.current(now) {
			cs.Remaining, cs.Reset = max(c.remaining-c.inFlight, 0), c.resetAt
		}
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b ClassState) int { return cmp.Compare(a.Class, b.Class) })
	return out
}

// Delays returns why each Caller's request is delayed now, by key.
func (p *Pacer) Delays() map[uint64]Delay {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.delays)
}

// Parked counts by class label the Callers parked on a delay that has not
// ended at now; a key's next Caller ends its park.
func (p *Pacer) Parked(now time.Time) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for key, d := range p.parks {
		if !d.Until.After(now) {
			delete(p.parks, key)
			continue
		}
		out[d.Class]++
	}
	return out
}
