package queue

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// Candidate is a file the watcher considers finished. Its fields match
// watcher.Candidate so the daemon can convert one into the other.
type Candidate struct {
	Path    string
	Root    string
	Size    int64
	ModTime time.Time
}

// EnqueueBatch adds, in one transaction, a job for each candidate unless its
// path is known with the same size and mtime, or an earlier job for it has
// not yet published (its worker notices the change). A changed file whose
// earlier job is finished or publishing becomes a new job. created reports,
// per candidate, whether a job was added.
func (s *Store) EnqueueBatch(ctx context.Context, cs []Candidate) (created []bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	created = make([]bool, len(cs))
	err = s.db.Update(func(tx *bolt.Tx) error {
		now := s.o.Now()
		for i, c := range cs {
			ok, err := s.enqueue(tx, c, now)
			if err != nil {
				return err
			}
			created[i] = ok
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return created, nil
}

func (s *Store) enqueue(tx *bolt.Tx, c Candidate, now time.Time) (bool, error) {
	if c.Path == "" {
		return false, errors.New("enqueue: empty path")
	}
	paths := pathIndex(tx)
	var pe pathEntry
	found, err := getJSON(paths, []byte(c.Path), &pe)
	if err != nil {
		return false, err
	}
	if found {
		if pe.Size == c.Size && pe.MTime == c.ModTime.UnixNano() {
			return false, nil
		}
		old, err := getJob(tx, pe.Job)
		if err == nil && !old.Stage.Final() && !old.Stage.Published() {
			return false, nil
		}
		if err != nil && !errors.Is(err, ErrNotFound) && !s.skip(err) {
			return false, err
		}
	}
	id, err := tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return false, err
	}
	j := state.Job{
		ID: id, File: state.File{Path: c.Path, Root: c.Root, Size: c.Size, ModTime: c.ModTime},
		Stage: state.Queued, NextAttempt: now, CreatedAt: now, UpdatedAt: now, StageSince: now,
	}
	if err := putJob(tx, j); err != nil {
		return false, err
	}
	if err := index(tx, j, true); err != nil {
		return false, err
	}
	return true, putJSON(paths, []byte(c.Path), pathEntry{V: 1, Job: id, Size: c.Size, MTime: c.ModTime.UnixNano()})
}

// Known reports whether path is already queued or finished with exactly
// this size and mtime, so the watcher can skip it without a write. Pruned
// jobs still count.
func (s *Store) Known(path string, size int64, mtime time.Time) bool {
	var known bool
	_ = s.db.View(func(tx *bolt.Tx) error {
		var pe pathEntry
		ok, err := getJSON(tx.Bucket(bucketPaths), []byte(path), &pe)
		known = err == nil && ok && pe.Size == size && pe.MTime == mtime.UnixNano()
		return nil
	})
	return known
}

// knownDropEvery is how many KnownBatch calls map the index's pages
// before one releases them: 16 folders of 100 files map about 100 of the
// index's pages at pathsFill.
const knownDropEvery = 16

// KnownBatch is Known for each of files (known[i] for files[i]), in one
// read transaction: a scan asks it once per folder, in path order.
func (s *Store) KnownBatch(files []Candidate) []bool {
	known := make([]bool, len(files))
	_ = s.db.View(func(tx *bolt.Tx) error {
		paths := seeker{c: tx.Bucket(bucketPaths).Cursor()}
		var key []byte
		for i, c := range files {
			var pe pathEntry
			key = append(key[:0], c.Path...)
			raw := paths.get(key)
			known[i] = raw != nil && decodePath(raw, &pe) == nil && pe.Size == c.Size && pe.MTime == c.ModTime.UnixNano()
		}
		if s.batches.Add(1)%knownDropEvery == 0 {
			s.db.dropWithin(tx) // a scan reads the whole index: keep a few batches' pages mapped
		}
		return nil
	})
	return known
}

// seekSteps bounds the Next steps seeker.get takes before it seeks.
const seekSteps = 4

// seeker is Bucket.Get for keys asked in ascending order: a key a few
// keys after the last one asked is reached by Next steps along the leaf,
// any other by a Seek from the root.
type seeker struct {
	c    *bolt.Cursor
	k, v []byte // where c is; k nil: nowhere yet, or past the end
}

// get is the bucket's Get(key).
func (s *seeker) get(key []byte) []byte {
	if s.k != nil && bytes.Compare(s.k, key) <= 0 {
		for range seekSteps {
			switch c := bytes.Compare(s.k, key); {
			case c == 0:
				return s.v
			case c > 0:
				return nil // the keys stepped over were all below key
			}
			if s.k, s.v = s.c.Next(); s.k == nil {
				return nil // every key is below key
			}
		}
	}
	s.k, s.v = s.c.Seek(key)
	if bytes.Equal(s.k, key) {
		return s.v
	}
	return nil
}

// Get returns the job with id, or an error matching ErrNotFound.
func (s *Store) Get(id uint64) (state.Job, error) {
	var j state.Job
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		j, err = getJob(tx, id)
		return err
	})
	return j, err
}

// Filter selects jobs for List. The zero Filter selects every job.
type Filter struct {
	// Stages keeps only jobs in one of these stages; empty means all.
	Stages []state.Stage
	// Limit caps the number of jobs returned (lowest ids first); 0 = all.
	Limit int
}

// List returns the jobs selected by f in id (enqueue) order.
func (s *Store) List(f Filter) ([]state.Job, error) {
	var out []state.Job
	err := s.db.View(func(tx *bolt.Tx) error {
		if len(f.Stages) == 0 {
			c := tx.Bucket(bucketJobs).Cursor()
			for k, v := c.First(); k != nil && (f.Limit <= 0 || len(out) < f.Limit); k, v = c.Next() {
				j, err := decodeJob(idOf(k), v)
				if s.skip(err) {
					j = unreadableJob(tx, err)
				} else if err != nil {
					return err
				}
				out = append(out, j)
			}
			return nil
		}
		// Merge the per-stage id lists into id order.
		var ids []uint64
		for _, stg := range f.Stages {
			b := tx.Bucket(bucketStages).Bucket([]byte(stg))
			if b == nil {
				return fmt.Errorf("list: unknown stage %q", stg)
			}
			c := b.Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				ids = append(ids, binary.BigEndian.Uint64(k))
			}
		}
		slices.Sort(ids)
		for _, id := range ids {
			if f.Limit > 0 && len(out) >= f.Limit {
				break
			}
			j, err := getJob(tx, id)
			if s.skip(err) {
				j = unreadableJob(tx, err)
			} else if err != nil {
				return err
			}
			out = append(out, j)
		}
		return nil
	})
	return out, err
}

// Stats is a summary of the store for metrics and `splatd jobs`.
type Stats struct {
	// Stages counts jobs per stage; every stage is present.
	Stages map[state.Stage]int
	// Jobs is the number of job records (pruned jobs excluded).
	Jobs int
	// OldestUnfinished is the creation time of the oldest job that is not
	// done, failed or canceled (held jobs count: they wait for an operator); zero if
	// there is none. OldestAge is its age.
	OldestUnfinished time.Time
	OldestAge        time.Duration
	// Tombstones is the number of pruned contents still deduplicated.
	Tombstones int
}

// Stats counts jobs per stage and finds the oldest unfinished one. The
// daemon calls it every few seconds, so it reads only the counters in the
// meta bucket and the first job of each unfinished stage: its cost does not
// grow with the jobs and tombstones the store has accumulated.
func (s *Store) Stats() (Stats, error) {
	st := Stats{Stages: make(map[state.Stage]int, len(state.Stages))}
	err := s.db.View(func(tx *bolt.Tx) error {
		st.Tombstones = count(tx, keyTombstones)
		for _, stg := range state.Stages {
			n := count(tx, stageCountKey(stg))
			st.Stages[stg] = n
			st.Jobs += n
			if stg.Finished() || n == 0 {
				continue
			}
			// Ids grow with enqueue time, so the first readable id of each
			// stage is its oldest job (a cursor, not stageIDs: Stats runs
			// every few seconds and stops at the first).
			c := tx.Bucket(bucketStages).Bucket([]byte(stg)).Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				j, err := getJob(tx, binary.BigEndian.Uint64(k))
				if s.skip(err) {
					continue
				}
				if err != nil {
					return err
				}
				if st.OldestUnfinished.IsZero() || j.CreatedAt.Before(st.OldestUnfinished) {
					st.OldestUnfinished = j.CreatedAt
				}
				break
			}
		}
		return nil
	})
	if !st.OldestUnfinished.IsZero() {
		st.OldestAge = s.o.Now().Sub(st.OldestUnfinished)
	}
	return st, err
}

// Retry puts a failed job back to Queued (it is checked, hashed and uploaded
// again), a held job back to Uploaded (the operator decided to publish
// again: the worker commits a new publish intent and publishes) and a done
// job back to Queued as a new generation (state.Job.Generation). It returns
// the updated job.
func (s *Store) Retry(id uint64) (state.Job, error) {
	var out state.Job
	err := s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if err != nil {
			return err
		}
		out, err = s.retry(tx, j, s.o.Now())
		return err
	})
	return out, err
}

// RetryFailed re-queues every failed job and returns how many.
func (s *Store) RetryFailed() (int, error) {
	var n int
	err := s.db.Update(func(tx *bolt.Tx) error {
		n = 0
		now := s.o.Now()
		for _, id := range stageIDs(tx, state.Failed) {
			j, err := getJob(tx, id)
			if s.skip(err) {
				continue
			}
			if err != nil {
				return err
			}
			if _, err := s.retry(tx, j, now); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// Resolve closes a held job with the splat its lost publish answer created,
// found by the operator on the account: the job polls that splat to done
// instead of publishing again. It returns the updated job.
func (s *Store) Resolve(id uint64, splatID string) (state.Job, error) {
	splatID = strings.TrimSpace(splatID)
	if splatID == "" {
		return state.Job{}, errors.New("resolve: empty splat id")
	}
	var out state.Job
	err := s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if j.Stage != state.Held {
			return fmt.Errorf("job %d is %s: only a held job can be resolved", j.ID, j.Stage)
		}
		old, now := j, s.o.Now()
		if err := j.Move(state.Processing, now); err != nil {
			return err
		}
		j.SplatID, j.SplatHash, j.ViewerURL, j.TaskStatus = splatID, "", "", ""
		j.Uncertain, j.Finalized = false, false
		j.TaskMessage, j.FailReason, j.LastError, j.LastStatus = "", "", "", 0
		if j.PublishedAt == nil {
			j.PublishedAt = &now
		}
		j.NextAttempt = now
		out = j
		return s.write(tx, old, j)
	})
	return out, err
}

func (s *Store) retry(tx *bolt.Tx, j state.Job, now time.Time) (state.Job, error) {
	old := j
	var why state.Reset
	switch j.Stage {
	case state.Done:
		// A duplicate published nothing itself; its content would only be
		// found published again.
		if j.DuplicateOf != 0 {
			return j, fmt.Errorf("job %d is a duplicate of job %d: retry job %d to publish the content again", j.ID, j.DuplicateOf, j.DuplicateOf)
		}
		why = state.ResetRepublish
	case state.Failed, state.Canceled:
		why = state.ResetRetry
	case state.Held:
		why = state.ResetResume
	default:
		// A live job waiting for its next attempt (a server's Retry-After,
		// a backoff): try it now, at the stage it is in.
		if j.NextAttempt.After(now) {
			j.NextAttempt = now
			return j, s.write(tx, old, j)
		}
		return j, fmt.Errorf("job %d is %s and not waiting: it is being worked on", j.ID, j.Stage)
	}
	if err := j.Reset(why, now); err != nil {
		return j, err
	}
	return j, s.write(tx, old, j)
}

// write replaces old with j and moves its index entries.
func (s *Store) write(tx *bolt.Tx, old, j state.Job) error {
	if err := index(tx, old, false); err != nil {
		return err
	}
	if err := putJob(tx, j); err != nil {
		return err
	}
	if err := index(tx, j, true); err != nil {
		return err
	}
	// Keep the path index on the size and mtime the job last saw of its
	// file, so an unchanged file stays Known: a job back in Queued holds the
	// file as the worker found it changed. (A checked SOG folder's job
	// holds its bundle's, which the watcher never sees.)
	if (j.Size != old.Size || !j.ModTime.Equal(old.ModTime)) && j.Stage == state.Queued {
		paths := tx.Bucket(bucketPaths)
		var pe pathEntry
		ok, err := getJSON(paths, []byte(j.Path), &pe)
		if err != nil {
			return err
		}
		if ok && pe.Job == j.ID {
			pe.Size, pe.MTime = j.Size, j.ModTime.UnixNano()
			if err := putJSON(paths, []byte(j.Path), pe); err != nil {
				return err
			}
		}
	}
	return nil
}

// unfinalizedDropEvery is how many jobs Unfinalized reads between releases
// of the mapped pages.
const unfinalizedDropEvery = 1024

// Unfinalized returns the final (done, failed, held) jobs whose Finish hook
// has not completed, so the pool can run it again after a crash.
func (s *Store) Unfinalized() ([]state.Job, error) {
	var out []state.Job
	err := s.db.View(func(tx *bolt.Tx) error {
		n := 0
		for _, stg := range []state.Stage{state.Done, state.Failed, state.Held, state.Canceled} {
			jobs := seeker{c: tx.Bucket(bucketJobs).Cursor()} // a stage's ids ascend
			for _, id := range stageIDs(tx, stg) {
				if n++; n%unfinalizedDropEvery == 0 {
					s.db.dropWithin(tx) // it reads every final job: keep a few pages mapped
				}
				if finalizedRecord(jobs.get(u64(id))) {
					continue
				}
				j, err := getJob(tx, id)
				if s.skip(err) {
					continue
				}
				if err != nil {
					return err
				}
				if !j.Finalized {
					out = append(out, j)
				}
			}
		}
		return nil
	})
	slices.SortFunc(out, func(a, b state.Job) int { return cmp.Compare(a.ID, b.ID) })
	return out, err
}

// MarkFinalized records that the Finish hook ran for final job id. It
// changes nothing else (not even UpdatedAt, which orders retention).
func (s *Store) MarkFinalized(id uint64) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if !j.Stage.Final() {
			return fmt.Errorf("job %d is %s, not final", id, j.Stage)
		}
		if j.Finalized {
			return nil
		}
		j.Finalized = true
		j.AfterAction, j.AfterError, j.AfterAttempts, j.AfterRetry = "", "", 0, time.Time{}
		return putJob(tx, j)
	})
}

// stageIDs lists the ids of the jobs in stage, in id order. Callers that
// write while walking the result are safe: the cursor is done before.
func stageIDs(tx *bolt.Tx, stage state.Stage) []uint64 {
	var ids []uint64
	c := tx.Bucket(bucketStages).Bucket([]byte(stage)).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		ids = append(ids, binary.BigEndian.Uint64(k))
	}
	return ids
}
