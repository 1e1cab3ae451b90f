package state

import (
	"math/rand/v2"
	"time"
)

// Jitter selects how Backoff randomises a delay. Randomising keeps many jobs
// that failed together (a storage outage) from retrying in lockstep.
type Jitter int

const (
	// EqualJitter waits between half and all of the exponential delay: it
	// spreads retries while guaranteeing a minimum pause.
	EqualJitter Jitter = iota
	// FullJitter waits anywhere between zero and the exponential delay.
	FullJitter
	// NoJitter waits exactly the exponential delay (poll intervals).
	NoJitter
)

// Backoff is a capped exponential retry delay: Base, 2·Base, 4·Base, …
// up to Cap, randomised by Jitter.
type Backoff struct {
	Base   time.Duration
	Cap    time.Duration
	Jitter Jitter
	// Rand returns a number in [0, 1); nil uses math/rand/v2. Tests inject
	// a fixed source.
	Rand func() float64
}

// DefaultBackoff is the retry policy for transient errors: 2 s doubling to
// 5 min with equal jitter.
var DefaultBackoff = Backoff{Base: 2 * time.Second, Cap: 5 * time.Minute, Jitter: EqualJitter}

// Delay returns the pause before retry number attempt (1 for the first
// retry). Values below 1 are treated as 1.
func (b Backoff) Delay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	base, limit := b.Base, b.Cap
	if base <= 0 {
		base = time.Second
	}
	if limit < base {
		limit = base
	}
	d := base
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	if d > limit || d <= 0 {
		d = limit
	}
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	switch b.Jitter {
	case FullJitter:
		return time.Duration(r() * float64(d))
	case EqualJitter:
		return d/2 + time.Duration(r()*float64(d/2))
	default:
		return d
	}
}
