package queue

import (
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// The operator's controls beyond retry and resolve: cancel, republish and
// forget. Each is one transaction; a worker holding the job finds it changed
// at its next commit (ErrConflict) and leaves it as the operator set it.

// JobByPath returns the latest job for path (the path index's), or an
// error matching ErrNotFound.
func (s *Store) JobByPath(path string) (state.Job, error) {
	var j state.Job
	err := s.db.View(func(tx *bolt.Tx) error {
		var pe pathEntry
		ok, err := getJSON(tx.Bucket(bucketPaths), []byte(path), &pe)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no job for %s: %w", path, ErrNotFound)
		}
		j, err = getJob(tx, pe.Job)
		return err
	})
	return j, err
}

// Cancel ends a job that has not sent its publish call (queued, ready,
// signed, uploaded; or held) as canceled: not a failure. A job past its
// publish intent is refused, since its splat may exist. It returns the
// updated job; its Finish hook (receipt) is the caller's to run.
func (s *Store) Cancel(id uint64) (state.Job, error) {
	var out state.Job
	err := s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if !j.Stage.Cancelable() {
			why := "it is finished"
			if j.Stage.Published() {
				why = "its publish call was sent: the splat may exist"
			}
			return fmt.Errorf("job %d is %s and cannot be canceled: %s", j.ID, j.Stage, why)
		}
		old, now := j, s.o.Now()
		if err := j.Move(state.Canceled, now); err != nil {
			return err
		}
		j.Uncertain, j.Finalized = false, false
		j.LastError, j.LastStatus, j.FailReason = "", 0, ""
		at := string(old.Stage)
		if old.Stage == state.Signed {
			at += " (uploading, as splatd jobs shows it)" // a signed job's bytes go out in that stage
		}
		j.TaskMessage = "canceled by an operator (splatd cancel) at stage " + at
		j.Upload = state.Upload{} // a signed URL is a secret with no further use
		j.Params.Settings = nil   // read again if it is retried; a smaller record commits on a full disk
		j.NextAttempt = now
		out = j
		return s.write(tx, old, j)
	})
	return out, err
}

// ErrDuplicate is returned by Republish for a job that was never published
// itself (its content was another job's).
var ErrDuplicate = errors.New("job is a duplicate")

// Republish sends a done job's file through the pipeline again, on purpose:
// it is checked, hashed, uploaded and published anew under the next
// Generation (state.Job.Generation). The content keeps its dedupe owner
// (this job), so the new publish is not taken for a duplicate of the old
// one. A job that was a duplicate is refused: republish the job that
// published the content.
func (s *Store) Republish(id uint64) (state.Job, error) {
	var out state.Job
	err := s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if j.Stage != state.Done {
			return fmt.Errorf("job %d is %s: only a done job can be republished (failed, held or canceled ones: splatd retry)", j.ID, j.Stage)
		}
		if j.DuplicateOf != 0 {
			return fmt.Errorf("job %d was not published itself, its content was job %d's: republish %d: %w", j.ID, j.DuplicateOf, j.DuplicateOf, ErrDuplicate)
		}
		old := j
		if err := j.Reset(state.ResetRepublish, s.o.Now()); err != nil {
			return err
		}
		out = j
		return s.write(tx, old, j)
	})
	return out, err
}

// Forget drops a finished (done, failed, canceled) or held job with its
// entry in the path index and its content's entry in the dedupe index when
// it owns it, so that its file, found again (a change, a rescan, a
// restart), is a new job, and its content may be published again under the
// next generation (hashEntry.Gen). It returns the job as it was. A job in
// flight is refused: cancel it first.
func (s *Store) Forget(id uint64) (state.Job, error) {
	s.lighten(id) // a full disk: diskfull.go
	var out state.Job
	err := s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if errors.Is(err, ErrUnreadable) {
			// No worker holds it (Claim skips it): forgotten at any stage.
			out, err = forgetUnreadable(tx, id)
			return err
		}
		if err != nil {
			return err
		}
		if !j.Stage.Final() {
			return fmt.Errorf("job %d is %s: only a finished or held job can be forgotten (splatd cancel %d first)", j.ID, j.Stage, j.ID)
		}
		out = j
		if err := index(tx, j, false); err != nil {
			return err
		}
		if err := tx.Bucket(bucketJobs).Delete(u64(j.ID)); err != nil {
			return err
		}
		paths := tx.Bucket(bucketPaths)
		var pe pathEntry
		if ok, err := getJSON(paths, []byte(j.Path), &pe); err != nil {
			return err
		} else if ok && pe.Job == j.ID {
			if err := paths.Delete([]byte(j.Path)); err != nil {
				return err
			}
		}
		if j.SHA256 == "" {
			return nil
		}
		shas := tx.Bucket(bucketSHA)
		var he hashEntry
		if ok, err := getJSON(shas, []byte(j.SHA256), &he); err != nil || !ok || he.Job != j.ID {
			return err
		}
		// The entry stays, owned by no job, with the next generation.
		return putJSON(shas, []byte(j.SHA256), hashEntry{V: 1, Job: j.ID, Gen: max(he.Gen, j.Generation) + 1})
	})
	if err == nil {
		s.badMu.Lock()
		delete(s.unreadable, id)
		s.badMu.Unlock()
	}
	return out, err
}
