package fleet

import (
	"testing"
	"time"
)

// TestShareBound: the patience for a silent peer is four times the 90th
// percentile of this daemon's own publish gaps, at least shareFloor, and
// shareCold until it has shareMinGaps of them.
func TestShareBound(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	s := New(Options{Now: func() time.Time { return at }})
	for i, gap := range []time.Duration{4, 5, 6, 20, 4, 5, 6, 4, 5, 30} {
		if got := s.bound(); i < shareMinGaps && got != shareCold {
			t.Fatalf("after %d gaps: %s, want %s", i, got, shareCold)
		}
		at = at.Add(gap * time.Second)
		s.published(at)
	}
	if got, want := s.bound(), 120*time.Second; got != want {
		t.Errorf("bound %s, want %s (4 x the 90th percentile, 30 s)", got, want)
	}
	s = New(Options{Now: func() time.Time { return time.Unix(0, 0) }})
	for i := range 5 {
		s.published(time.Unix(int64(i+1), 0))
	}
	if got := s.bound(); got != shareFloor {
		t.Errorf("bound of 1 s gaps %s, want the floor %s", got, shareFloor)
	}
}
