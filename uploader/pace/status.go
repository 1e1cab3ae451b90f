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
	Waiting   int       // requests of this class delayed now
	InFlight  int       // requests of this class sent and not yet answered
	Parked    int       // Callers parked on this class until a time after now
}

// Classes returns the known limit classes, in name order.
func (p *Pacer) Classes() []ClassState {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.o.Now()
	waiting, parked := map[*class]int{}, map[string]int{}
	for _, c := range p.sleepers {
		waiting[c]++
	}
	for key, d := range p.parks {
		if d.Until.After(now) {
			parked[d.Class]++
		} else {
			delete(p.parks, key) // over: a key's next Caller would end it too
		}
	}
	out := make([]ClassState, 0, len(p.classes))
	for _, c := range p.classes {
		name := ClassName(c.limit)
		cs := ClassState{Class: name, Limit: c.limit, Remaining: c.limit, Waiting: waiting[c], InFlight: c.inFlight, Parked: parked[name]}
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
