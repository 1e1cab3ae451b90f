package queue

import (
	"time"

	bolt "go.etcd.io/bbolt"
)

// A job's wait is its NextAttempt less the UpdatedAt of the commit that set
// it. A wall clock stepped back would stretch that wait by the step, so
// when the store sees the clock behind a commit (at open, and at a claim
// whose now is earlier than the last claim's) each waiting job committed
// after now is due again its own wait from now, never later.

// clockSlack is how far a claim's now may trail the last one before the
// clock counts as stepped back (workers read the clock before the lock).
const clockSlack = time.Second

// noteClock records now as the latest claim time and reports whether the
// clock went back since the last claim, and by how much when both times
// carry a monotonic reading (time.Now's do; 0 when unknown). s.mu is held.
func (s *Store) noteClock(now time.Time) (back bool, step time.Duration) {
	last := s.lastClaim
	if now.Before(last.Add(-clockSlack)) {
		s.lastClaim = now
		return true, now.Round(0).Sub(last.Round(0)) - now.Sub(last)
	}
	if now.After(last) {
		s.lastClaim = now
	}
	return false, 0
}

// capWaitsTx re-dates every waiting job committed after now (the clock went
// back since): by step when it is known, never later than its own wait
// from now. It returns how many it moved.
func capWaitsTx(tx *bolt.Tx, now time.Time, step time.Duration, skip func(error) bool) (int, error) {
	var ids []uint64
	c := tx.Bucket(bucketDue).Cursor()
	for k, _ := c.Seek(timeKey(now, ^uint64(0))); k != nil; k, _ = c.Next() {
		_, id := splitTimeKey(k)
		ids = append(ids, id)
	}
	n := 0
	for _, id := range ids {
		j, err := getJob(tx, id)
		if skip(err) {
			continue
		}
		if err != nil {
			return n, err
		}
		if !j.UpdatedAt.After(now) || !j.NextAttempt.After(now) {
			continue
		}
		old := j
		wait := max(j.NextAttempt.Sub(j.UpdatedAt), 0)
		next := j.NextAttempt.Add(step)
		if next.After(now.Add(wait)) {
			next = now.Add(wait)
		}
		j.NextAttempt, j.UpdatedAt = next, now
		if err := index(tx, old, false); err != nil {
			return n, err
		}
		if err := putJob(tx, j); err != nil {
			return n, err
		}
		if err := index(tx, j, true); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// capWaits runs capWaitsTx in a transaction of its own and logs what moved.
func (s *Store) capWaits(now time.Time, step time.Duration) error {
	var n int
	err := s.db.Update(func(tx *bolt.Tx) error {
		var err error
		n, err = capWaitsTx(tx, now, step, s.skip)
		return err
	})
	if n > 0 {
		s.log.Warn().Int("jobs", n).Time("now", now).Msg("the clock went back: waiting jobs are due again their own wait from now")
	}
	return err
}
