package queue

import (
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// TestWaitSurvivesClockSteps: a job in a backoff of 10 s waits at most 10 s
// of the clock however the clock moved: stepped back an hour (running, and
// while the daemon was down) it is due 10 s after the step, not an hour
// later; stepped forward it is due at once. The test clock has no monotonic
// reading: the wait restarts at the step, the longest it may be.
func TestWaitSurvivesClockSteps(t *testing.T) {
	t.Parallel()
	const wait = 10 * time.Second
	for _, tc := range []struct {
		name    string
		step    time.Duration
		reopen  bool
		dueFrom time.Duration // after the step, when the job is due
	}{
		{"back an hour", -time.Hour, false, wait},
		{"back an hour while down", -time.Hour, true, wait},
		{"forward an hour", time.Hour, false, 0},
		{"unmoved", 0, false, wait},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk, dir := newClock(), t.TempDir()
			s := open(t, dir, Options{Now: clk.Now})
			mustEnqueue(t, s, cand("/w/a.ply", 10, 100), true)
			j := claim(t, s, clk.Now())
			j.Attempts, j.LastError = 1, "stat: transient"
			j.NextAttempt = clk.Now().Add(wait)
			if _, err := s.Commit(j, state.Queued); err != nil {
				t.Fatal(err)
			}
			s.Release(j.ID)
			clk.Add(tc.step)
			if tc.reopen {
				s.Close()
				s = open(t, dir, Options{Now: clk.Now})
			}
			start := clk.Now()
			if tc.dueFrom > 0 {
				if _, ok, err := s.Claim(start); ok || err != nil {
					t.Fatalf("claimed at the step, before its wait ended (err %v)", err)
				}
				if _, ok, err := s.Claim(start.Add(tc.dueFrom - time.Second)); ok || err != nil {
					t.Fatalf("claimed %v before its wait ended (err %v)", tc.dueFrom-time.Second, err)
				}
			}
			got, ok, err := s.Claim(start.Add(tc.dueFrom))
			if err != nil || !ok || got.ID != j.ID {
				next, _ := s.NextDue()
				t.Fatalf("not due %v after the step: ok=%v err=%v, next due %v after it", tc.dueFrom, ok, err, next.Sub(start))
			}
		})
	}
}
