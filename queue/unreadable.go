package queue

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// A job record that cannot be decoded is one job's problem: the walks over
// many jobs skip it and report it once per process (docs/architecture.md,
// "The state file"); an operation on that one job fails, saying what to do.

// ErrUnreadable matches the error of a job record that cannot be decoded
// (an *UnreadableError).
var ErrUnreadable = errors.New("job record cannot be read")

// UnreadableError is the error of a stored job record that state.Unmarshal
// refuses.
type UnreadableError struct {
	ID  uint64
	Err error
}

func (e *UnreadableError) Error() string {
	return fmt.Sprintf("job %d: its stored record cannot be read (%v): splatd forget %d removes it", e.ID, e.Err, e.ID)
}

func (e *UnreadableError) Is(target error) bool { return target == ErrUnreadable }
func (e *UnreadableError) Unwrap() error        { return e.Err }

// skip reports whether err is an unreadable record's, which the caller
// passes over; the first time an id is met, it is logged.
func (s *Store) skip(err error) bool {
	var ue *UnreadableError
	if !errors.As(err, &ue) {
		return false
	}
	s.badMu.Lock()
	_, seen := s.unreadable[ue.ID]
	s.unreadable[ue.ID] = struct{}{}
	s.badMu.Unlock()
	if !seen {
		s.log.Error().Uint64("job", ue.ID).Err(ue.Err).
			Msg(fmt.Sprintf("job %d's stored record cannot be read: it is skipped; splatd forget %d removes it", ue.ID, ue.ID))
	}
	return true
}

// isUnreadable reports whether job id's record was found unreadable.
func (s *Store) isUnreadable(id uint64) bool {
	s.badMu.Lock()
	defer s.badMu.Unlock()
	_, ok := s.unreadable[id]
	return ok
}

// unreadableJob stands in a list for the record of job id that cannot be
// read: its id, its stage as the index holds it, and the reason.
func unreadableJob(tx *bolt.Tx, err error) state.Job {
	var ue *UnreadableError
	errors.As(err, &ue)
	return state.Job{ID: ue.ID, Stage: stageOf(tx, ue.ID), Failure: state.Failure{LastError: ue.Error()}}
}

// stageOf is the stage whose index holds job id ("" if none does).
func stageOf(tx *bolt.Tx, id uint64) state.Stage {
	for _, stg := range state.Stages {
		if has(tx.Bucket(bucketStages).Bucket([]byte(stg)), u64(id)) {
			return stg
		}
	}
	return ""
}

// forgetUnreadable removes job id, whose record cannot be read, with the
// index entries that name it. Without the record they are found by
// walking the indexes (the path index is the long one): an operator's
// repair, not a worker's path. Its content's sha256 entry, which cannot be
// found without the record, is left: an entry whose job is gone is taken
// over by the next job with that content (dedupe). It returns what is
// known of the job: id, stage and path.
func forgetUnreadable(tx *bolt.Tx, id uint64) (state.Job, error) {
	j := state.Job{ID: id, Stage: stageOf(tx, id)}
	if j.Stage != "" {
		if err := tx.Bucket(bucketStages).Bucket([]byte(j.Stage)).Delete(u64(id)); err != nil {
			return j, err
		}
		if err := addCount(tx, stageCountKey(j.Stage), -1); err != nil {
			return j, err
		}
	}
	for _, name := range [][]byte{bucketDue, bucketFinished} {
		b := tx.Bucket(name)
		var keys [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if _, kid := splitTimeKey(k); kid == id {
				keys = append(keys, append([]byte(nil), k...))
			}
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return j, err
			}
		}
	}
	paths := tx.Bucket(bucketPaths)
	var keys [][]byte
	c := paths.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var pe pathEntry
		if json.Unmarshal(v, &pe) == nil && pe.Job == id {
			keys = append(keys, append([]byte(nil), k...))
		}
	}
	for _, k := range keys {
		if err := paths.Delete(k); err != nil {
			return j, err
		}
		j.Path = string(k)
	}
	return j, tx.Bucket(bucketJobs).Delete(u64(id))
}

// decodeJob decodes the stored record of job id.
func decodeJob(id uint64, v []byte) (state.Job, error) {
	j, err := state.Unmarshal(v)
	if err != nil {
		return state.Job{}, &UnreadableError{ID: id, Err: err}
	}
	return j, nil
}

// idOf is the job id of a key of the jobs bucket.
func idOf(k []byte) uint64 { return binary.BigEndian.Uint64(k) }
