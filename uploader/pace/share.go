package pace

import (
	"cmp"
	"time"
)

// share is the calculator of a class's reserve for the token's other
// clients, from what the answers showed of their use (package doc).
type share struct {
	others, expect, peers int
	late                  time.Duration
	quiet                 int
}

// keep returns how many of the left requests of a window of limit to keep
// for the others, used of it being ours: the most of what expect leaves
// them (none yet: as much again as they spent), one slot, and peers; in a
// class of more than carefulSlots with peers, the fleet's fair share.
func (s *share) keep(limit, left, used int) int {
	e := cmp.Or(s.expect, 2*s.others)
	r := max(e-s.others, min(1, e), s.peers)
	switch {
	case limit <= carefulSlots || s.peers == 0:
	case used < limit/(s.peers+1): // below our fair share: all but one free slot
		r = min(r, max(1, left-1))
	default: // past it: the others' share of what is left
		r = min(r, left-left/(s.peers+1))
	}
	return r
}

// end closes a window of limit: expect becomes the most of itself and what
// the others spent, halved first after a window seen late enough (quiet 0)
// or after quietWindows without them; it stays at most limit − 2.
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

// sawOthers raises the others' use of the window to f, shown lead before
// its Reset.
func (s *share) sawOthers(f int, lead time.Duration) {
	if s.others == 0 && f > 0 {
		s.late = lead
	}
	s.others = max(s.others, f)
}

// sawPeers raises peers to the others' requests since our last answer,
// when we had looked at the window (looked) before this one.
func (s *share) sawPeers(f int, looked bool) {
	if looked && f > s.others {
		s.peers = max(s.peers, f-s.others)
	}
}
