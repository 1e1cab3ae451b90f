package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// Adoption is a file whose receipt proves it published (after.Check): it
// is recorded as a done job instead of being queued, so a new or lost state
// directory never publishes it again.
type Adoption struct {
	Path    string
	Root    string
	Size    int64
	ModTime time.Time
	SHA256  string

	SplatID, SplatHash, URL string
	Title, Format           string
	PublishedAt             *time.Time
	CompletedAt             *time.Time
	// Receipt is the receipt's path, named in the job's message.
	Receipt string
}

// AdoptChunk is how many adoptions AdoptBatch records in one transaction,
// followed by its retention pass: each reads a random page of the sha256
// index, and each read maps the 64 KiB around it (docs/architecture.md,
// "The watcher's scan").
const AdoptChunk = 64

// AdoptBatch records each adoption as a done job (Adopted, Finalized: the
// after-action already ran when the receipt was written), AdoptChunk to a
// transaction, unless the state already knows the path with this size and
// mtime or holds an unpublished job for it. The adopted job owns its
// content in the sha256 index when no live job does, so a copy of the file
// elsewhere is a duplicate, not a publish. It returns, per adoption, the
// job created (ID 0: none); on an error, those of the transactions
// committed before it.
func (s *Store) AdoptBatch(ctx context.Context, as []Adoption) ([]state.Job, error) {
	out := make([]state.Job, 0, len(as))
	for lo := 0; lo < len(as); lo += AdoptChunk {
		jobs, err := s.adoptChunk(ctx, as[lo:min(lo+AdoptChunk, len(as))])
		if err != nil {
			return out, err
		}
		out = append(out, jobs...)
	}
	return out, nil
}

// adoptChunk records as in one transaction, then runs retention, so that
// a folder of receipts reuses the pages the last chunk freed instead of
// growing the file.
func (s *Store) adoptChunk(ctx context.Context, as []Adoption) ([]state.Job, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]state.Job, len(as))
	err := s.db.Update(func(tx *bolt.Tx) error {
		s.db.dropWithin(tx)
		now := s.o.Now()
		for i, a := range as {
			j, err := s.adopt(tx, a, now)
			if err != nil {
				return err
			}
			out[i] = j
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := s.Prune(); err != nil {
		s.log.Error().Err(err).Msg("retention pass failed")
	}
	return out, nil
}

func (s *Store) adopt(tx *bolt.Tx, a Adoption, now time.Time) (state.Job, error) {
	if a.Path == "" || a.SHA256 == "" {
		return state.Job{}, errors.New("adopt: empty path or sha256")
	}
	if ok, err := s.adoptable(tx, a); !ok || err != nil {
		return state.Job{}, err
	}
	id, err := tx.Bucket(bucketJobs).NextSequence()
	if err != nil {
		return state.Job{}, err
	}
	j := adoptedJob(id, a, now)
	if err := putJob(tx, j); err != nil {
		return state.Job{}, err
	}
	if err := index(tx, j, true); err != nil {
		return state.Job{}, err
	}
	if err := putJSON(pathIndex(tx), []byte(a.Path), pathEntry{V: 1, Job: id, Size: a.Size, MTime: a.ModTime.UnixNano()}); err != nil {
		return state.Job{}, err
	}
	if err := s.adoptContent(tx, a.SHA256, id); err != nil {
		return state.Job{}, err
	}
	return j, nil
}

// adoptable reports whether a's path is free for an adopted job: unknown,
// known in another version, or its job final.
func (s *Store) adoptable(tx *bolt.Tx, a Adoption) (bool, error) {
	var pe pathEntry
	found, err := getJSON(tx.Bucket(bucketPaths), []byte(a.Path), &pe)
	if err != nil || !found {
		return err == nil, err
	}
	if pe.Size == a.Size && pe.MTime == a.ModTime.UnixNano() {
		return false, nil // known as it is
	}
	old, err := getJob(tx, pe.Job)
	if err != nil && !errors.Is(err, ErrNotFound) && !s.skip(err) {
		return false, err
	}
	return err != nil || old.Stage.Final(), nil // a live job's worker is at it
}

// adoptedJob is the done job a receipt stands for.
func adoptedJob(id uint64, a Adoption, now time.Time) state.Job {
	return state.Job{
		ID: id, File: state.File{Path: a.Path, Root: a.Root, Size: a.Size, ModTime: a.ModTime, SHA256: a.SHA256},
		Stage: state.Done, NextAttempt: now, CreatedAt: now, UpdatedAt: now, StageSince: now,
		Params: state.PublishParams{Title: a.Title, Format: a.Format},
		Splat: state.Splat{
			SplatID: a.SplatID, SplatHash: a.SplatHash, ViewerURL: a.URL,
			TaskStatus: "adopted", TaskMessage: fmt.Sprintf("adopted from its receipt %s: published before, not published again", a.Receipt),
			PublishedAt: a.PublishedAt, CompletedAt: cmp.Or(a.CompletedAt, &now),
		},
		Publication: state.Publication{Adopted: true},
		After:       state.After{Finalized: true},
	}
}

// adoptContent makes job id the owner of its content unless a live job
// that published it owns it already.
func (s *Store) adoptContent(tx *bolt.Tx, sha256 string, id uint64) error {
	shas := tx.Bucket(bucketSHA)
	var he hashEntry
	ok, err := getJSON(shas, []byte(sha256), &he)
	if err != nil {
		return err
	}
	take := !ok
	if ok && !he.Pruned {
		owner, err := getJob(tx, he.Job)
		switch {
		case errors.Is(err, ErrNotFound) || s.skip(err):
			take = true
		case err != nil:
			return err
		default:
			take = owner.Stage == state.Failed || owner.SHA256 != sha256
		}
	}
	if !take {
		return nil
	}
	return putJSON(shas, []byte(sha256), hashEntry{V: 1, Job: id, Gen: he.Gen})
}

// RecordAfterError records that final job id's after-action failed: which
// action, why, and when the pool tries it again. The job stays
// unfinalized; MarkFinalized clears the record once the action succeeds.
func (s *Store) RecordAfterError(id uint64, action, msg string, retry time.Time) (state.Job, error) {
	var out state.Job
	err := s.db.Update(func(tx *bolt.Tx) error {
		j, err := getJob(tx, id)
		if err != nil {
			return err
		}
		if !j.Stage.Final() || j.Finalized {
			return fmt.Errorf("job %d is %s (finalized %v): no after-action pending", id, j.Stage, j.Finalized)
		}
		j.AfterAction, j.AfterError, j.AfterRetry = action, msg, retry
		j.AfterAttempts++
		out = j
		return putJob(tx, j)
	})
	return out, err
}

// keyPing is the meta key Ping writes.
var keyPing = []byte("ping")

// Ping writes one small record and fsyncs it: whether the store can commit
// again (the daemon's intake probes a full disk with it).
func (s *Store) Ping() error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyPing, u64(uint64(s.o.Now().UnixNano())))
	})
}
