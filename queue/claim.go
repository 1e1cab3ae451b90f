package queue

import (
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// claimWindow is how many of the earliest due jobs Claim ranks: enough to
// spread a fleet's first picks over a folder's backlog, few enough that a
// claim costs a bounded number of reads however long the backlog is.
const claimWindow = 128

// Claim hands out a runnable job due not after now that no other caller
// holds, and marks it held until Release; ok is false when nothing is due.
// Begun jobs go first, earliest due; then, with Options.Identity, the
// queued job of lowest rendezvous rank among the first claimWindow due.
// Claims live in memory only: a restart frees them all.
func (s *Store) Claim(now time.Time) (job state.Job, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if back, step := s.noteClock(now); back {
		if err := s.capWaits(now, step); err != nil {
			return state.Job{}, false, err
		}
	}
	var best uint64
	err = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDue).Cursor()
		seen := 0
		for k, _ := c.First(); k != nil && seen < claimWindow; k, _ = c.Next() {
			at, id := splitTimeKey(k)
			if at.After(now) {
				break
			}
			if _, held := s.claimed[id]; held {
				continue
			}
			j, err := getJob(tx, id)
			if s.skip(err) {
				continue
			}
			if err != nil {
				return err
			}
			seen++
			if s.o.Identity == "" || j.Stage != state.Queued || j.Attempts > 0 {
				job, ok = j, true
				return nil
			}
			if r := rendezvous(j, s.o.Identity); !ok || r < best {
				job, ok, best = j, true, r
			}
		}
		return nil
	})
	if ok {
		s.claimed[job.ID] = struct{}{}
	}
	return job, ok, err
}

// rendezvous is a queued job's rank for a daemon: a hash of the file's key
// (its path under its watch folder, and its size: what every daemon of a
// fleet sees the same before hashing) and the daemon's identity.
func rendezvous(j state.Job, identity string) uint64 {
	key := j.Path
	if j.Root != "" {
		if rel, err := filepath.Rel(j.Root, j.Path); err == nil {
			key = filepath.ToSlash(rel)
		}
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%d\x00%s", key, j.Size, identity)
	return h.Sum64()
}

// NextDue returns when the earliest unclaimed runnable job is due; ok is
// false when there is none (workers then sleep until woken).
func (s *Store) NextDue() (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketDue).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			t, id := splitTimeKey(k)
			if _, held := s.claimed[id]; !held && !s.isUnreadable(id) {
				at, ok = t, true
				return nil
			}
		}
		return nil
	})
	return at, ok
}

// Release gives a claimed job back; it becomes claimable at its
// NextAttempt.
func (s *Store) Release(id uint64) {
	s.mu.Lock()
	delete(s.claimed, id)
	s.mu.Unlock()
}

// Commit stores j, moved on from stage `from`, with its index entries in
// one transaction. It fails with ErrConflict if the stored job is no
// longer in `from`, with a *state.TransitionError if the table forbids the
// move. A job reaching Ready with a published content's sha256 is stored
// Done with DuplicateOf; one whose owner is still in flight waits in
// Queued for DedupeWait.
func (s *Store) Commit(j state.Job, from state.Stage) (state.Job, error) {
	var finished bool
	err := s.db.Update(func(tx *bolt.Tx) error {
		stored, err := getJob(tx, j.ID)
		if errors.Is(err, ErrUnreadable) {
			// The worker's job is dropped as if an operator had changed it:
			// retrying this commit cannot help.
			s.skip(err)
			return fmt.Errorf("commit job %d: %w: %w", j.ID, ErrConflict, err)
		}
		if err != nil {
			return err
		}
		if stored.Stage != from {
			return fmt.Errorf("commit job %d as %s: stored stage is %s, expected %s: %w", j.ID, j.Stage, stored.Stage, from, ErrConflict)
		}
		// A final job moves only by an operator's Retry, Republish or
		// Resolve (state.Reset), never by a worker's commit.
		if !state.CanMove(from, j.Stage) || from.Final() {
			return &state.TransitionError{ID: j.ID, From: from, To: j.Stage}
		}
		now := s.o.Now()
		j.UpdatedAt = now
		if j.Stage != from && !j.StageSince.After(stored.StageSince) {
			j.StageSince = now
		}
		if j.Stage == state.Ready && from != state.Ready {
			if j, err = s.dedupe(tx, j, from, now); err != nil {
				return err
			}
		}
		if err := s.write(tx, stored, j); err != nil {
			return err
		}
		finished = j.Stage.Finished() && j.Stage != from
		return nil
	})
	if err != nil {
		return state.Job{}, err
	}
	if finished {
		s.mu.Lock()
		s.finished++
		due := s.finished >= s.o.PruneEvery
		if due {
			s.finished = 0
		}
		s.mu.Unlock()
		if due {
			if _, err := s.Prune(); err != nil {
				s.log.Error().Err(err).Msg("retention pass failed")
			}
		}
	}
	return j, nil
}

func (s *Store) dedupe(tx *bolt.Tx, j state.Job, from state.Stage, now time.Time) (state.Job, error) {
	if j.SHA256 == "" {
		return j, fmt.Errorf("job %d: ready without sha256", j.ID)
	}
	shas := tx.Bucket(bucketSHA)
	key := []byte(j.SHA256)
	var he hashEntry
	found, err := getJSON(shas, key, &he)
	if err != nil {
		return j, err
	}
	if found && he.Job != j.ID {
		owner, err := getJob(tx, he.Job)
		switch {
		case errors.Is(err, ErrNotFound) || he.Pruned || s.skip(err):
			if he.Pruned {
				return duplicate(j, state.Job{ID: he.Job, Splat: state.Splat{SplatID: he.SplatID, SplatHash: he.Hash, ViewerURL: he.URL}}, now), nil
			}
			// A dangling entry (pruned failed owner, or an owner whose
			// record cannot be read): take it over.
		case err != nil:
			return j, err
		case owner.SHA256 != j.SHA256 || owner.Stage == state.Failed || owner.Stage == state.Canceled:
			// The owner was re-hashed to other content, gave up or was
			// canceled: nothing of it is published.
		case owner.Stage == state.Done:
			return duplicate(j, owner, now), nil
		default:
			// In flight: wait for its outcome rather than guess it.
			j.Stage = from
			j.StageSince = now
			j.NextAttempt = now.Add(s.o.DedupeWait)
			j.LastError = fmt.Sprintf("waiting for job %d with the same content (%s)", owner.ID, owner.Stage)
			return j, nil
		}
	}
	// Never a tombstone overwritten here (a pruned owner made j a duplicate
	// above, and j itself is not pruned), so the tombstone count holds.
	if found && he.Gen > j.Generation {
		j.Generation = he.Gen
	}
	return j, putJSON(shas, key, hashEntry{V: 1, Job: j.ID, Gen: j.Generation})
}

func duplicate(j, owner state.Job, now time.Time) state.Job {
	j.Stage = state.Done
	j.StageSince = now
	j.DuplicateOf = owner.ID
	j.SplatID, j.SplatHash, j.ViewerURL = owner.SplatID, owner.SplatHash, owner.ViewerURL
	j.TaskStatus = "duplicate"
	j.CompletedAt = &now
	j.LastError = ""
	return j
}

// pruneBatch bounds the jobs one retention transaction deletes, so that a
// pass over a large backlog holds a bounded number of dirty pages.
const pruneBatch = 1000

// Prune applies the retention rule: finished jobs beyond MaxFinished (oldest
// first) or older than MaxAge are deleted. A pruned done job leaves a
// tombstone in the sha256 index so its content stays deduplicated, and its
// path entry so the unchanged file stays Known. It returns the number of
// jobs pruned.
func (s *Store) Prune() (int, error) {
	var n, skipped int
	var after []byte
	for {
		pruned, next, err := s.pruneSome(after, &skipped)
		n += pruned
		if err != nil || next == nil {
			if n > 0 {
				s.log.Debug().Int("jobs", n).Msg("pruned finished jobs")
			}
			return n, err
		}
		after = next
	}
}

// pruneSome is one transaction of Prune: at most pruneBatch jobs from the
// finished bucket's key after (nil: its start). It returns the key to go on
// after (nil when the pass is over); skipped counts the unreadable records
// kept so far, which still count toward MaxFinished.
func (s *Store) pruneSome(after []byte, skipped *int) (int, []byte, error) {
	r := s.o.Retention
	var n int
	var next []byte
	err := s.db.Update(func(tx *bolt.Tx) error {
		s.db.dropWithin(tx)
		n, next = 0, nil
		// The finished bucket holds the done, failed and canceled jobs:
		// their counters say how many without walking it.
		fin := tx.Bucket(bucketFinished)
		total := count(tx, stageCountKey(state.Done)) + count(tx, stageCountKey(state.Failed)) + count(tx, stageCountKey(state.Canceled))
		cutoff := s.o.Now().Add(-r.MaxAge)
		var victims [][]byte
		c := fin.Cursor()
		k, _ := c.First()
		if after != nil {
			if k, _ = c.Seek(after); k != nil && string(k) == string(after) {
				k, _ = c.Next()
			}
		}
		for ; k != nil; k, _ = c.Next() {
			at, _ := splitTimeKey(k)
			over := r.MaxFinished >= 0 && total-*skipped-len(victims) > r.MaxFinished
			old := r.MaxAge > 0 && at.Before(cutoff)
			if !over && !old {
				break
			}
			if len(victims) == pruneBatch {
				next = victims[len(victims)-1]
				break
			}
			victims = append(victims, append([]byte(nil), k...))
		}
		kept := 0
		for _, k := range victims {
			_, id := splitTimeKey(k)
			j, err := getJob(tx, id)
			if s.skip(err) {
				kept++ // kept until an operator forgets it
				continue
			}
			if err != nil {
				return err
			}
			if err := s.prune(tx, j); err != nil {
				return err
			}
			n++
		}
		*skipped += kept
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return n, next, nil
}

func (s *Store) prune(tx *bolt.Tx, j state.Job) error {
	if err := index(tx, j, false); err != nil {
		return err
	}
	if err := tx.Bucket(bucketJobs).Delete(u64(j.ID)); err != nil {
		return err
	}
	if j.SHA256 == "" {
		return nil
	}
	shas := tx.Bucket(bucketSHA)
	var he hashEntry
	ok, err := getJSON(shas, []byte(j.SHA256), &he)
	if err != nil || !ok || he.Job != j.ID {
		return err
	}
	if j.Stage == state.Done {
		return putTombstone(tx, []byte(j.SHA256), j)
	}
	return shas.Delete([]byte(j.SHA256))
}

// putTombstone replaces the sha256 entry of done job j, which is being
// pruned, with the tombstone that keeps its content deduplicated, and
// counts it.
func putTombstone(tx *bolt.Tx, sha []byte, j state.Job) error {
	if err := putJSON(tx.Bucket(bucketSHA), sha, tombstone(j)); err != nil {
		return err
	}
	return addCount(tx, keyTombstones, 1)
}

// tombstone is the sha256 entry a pruned done job leaves.
func tombstone(j state.Job) hashEntry {
	return hashEntry{V: 1, Job: j.ID, Pruned: true,
		SplatID: j.SplatID, Hash: j.SplatHash, URL: j.ViewerURL, At: j.UpdatedAt, Gen: j.Generation}
}
