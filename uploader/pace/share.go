package pace

import (
	"cmp"
	"time"
)

// share calculates a class's reserve for the token's other clients.
type share struct {
	others, expect, peers int
	late                  time.Duration
	quiet                 int
}

// keep returns how many of left to keep for the others, used being ours; a large
// class keeps at most their fair share over n clients (Options.Clients; 0: peers + 1).
func (s *share) keep(limit, left, used, n int) int {
	e := cmp.Or(s.expect, 2*s.others)
	r := max(e-s.others, min(1, e), s.peers)
	switch {
	case n <= 0:
		n = s.peers + 1
	case n == 1 && s.others > 0:
		n = 2 // others spent this window: a client the fleet does not know
	}
	switch {
	case limit <= carefulSlots || s.peers == 0:
		return r
	case used < limit/n: // below our fair share: all but one free slot
		return min(r, max(1, left-1))
	}
	return min(r, left-left/(s.peers+1)) // past it: the others' share of what is left
}

// end closes a window: expect (≤ limit − 2) rises to the others' use; halves when seen late or long quiet.
func (s *share) end(limit int) {
	if s.quiet == 0 || s.quiet > quietWindows && s.others == 0 {
		s.expect /= 2
	}
	s.expect = min(max(s.expect, s.others), limit-2)
	s.quiet++
	if s.others > 0 {
		s.quiet = 1
	} else {
		s.peers = 0
	}
	s.others = 0
}

// sawOthers raises the others' use to f, seen lead before Reset.
func (s *share) sawOthers(f int, lead time.Duration) {
	if s.others == 0 && f > 0 {
		s.late = lead
	}
	s.others = max(s.others, f)
}

// sawPeers raises peers to the others' requests since our last look.
func (s *share) sawPeers(f int, looked bool) {
	if looked && f > s.others {
		s.peers = max(s.peers, f-s.others)
	}
}
