package queue

import (
	"bytes"
	"context"
	"encoding/json"

	bolt "go.etcd.io/bbolt"
)

// trimBatch is how many path entries one read transaction looks at, so
// that a trim of a million entries never holds a long read transaction.
const trimBatch = 2000

// TrimPaths forgets the path entries of pruned jobs whose file is gone
// (moved to success_dir, deleted, renamed): they exist only so that an
// unchanged file stays Known, and without this pass the path index would
// grow for as long as the daemon runs. gone is called outside any
// transaction (it stats files). Content dedupe is unaffected: it lives in
// the sha256 tombstones. It returns the number of entries removed.
func (s *Store) TrimPaths(ctx context.Context, gone func(path string) bool) (int, error) {
	removed := 0
	var after []byte // last key of the previous batch
	for {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		cands, end, err := s.prunedPaths(&after)
		if err != nil {
			return removed, err
		}
		var drop [][]byte
		for _, p := range cands {
			if gone(string(p)) {
				drop = append(drop, p)
			}
		}
		n, err := s.dropPaths(drop)
		removed += n
		if err != nil {
			return removed, err
		}
		if end {
			break
		}
	}
	if removed > 0 {
		s.log.Debug().Int("paths", removed).Msg("forgot the paths of pruned jobs whose files are gone")
	}
	return removed, nil
}

// prunedPaths reads the next trimBatch path entries after *after (all from
// the first when nil), moving *after on, and returns those whose job is
// pruned; end says the bucket was read to its end.
func (s *Store) prunedPaths(after *[]byte) (cands [][]byte, end bool, err error) {
	err = s.db.View(func(tx *bolt.Tx) error {
		jobs := tx.Bucket(bucketJobs)
		c := tx.Bucket(bucketPaths).Cursor()
		k, v := c.First()
		if *after != nil {
			if k, v = c.Seek(*after); k != nil && bytes.Equal(k, *after) {
				k, v = c.Next()
			}
		}
		for n := 0; n < trimBatch && k != nil; n++ {
			*after = append((*after)[:0], k...)
			var pe pathEntry
			if json.Unmarshal(v, &pe) == nil && jobs.Get(u64(pe.Job)) == nil {
				cands = append(cands, append([]byte(nil), k...))
			}
			k, v = c.Next()
		}
		end = k == nil
		return nil
	})
	return cands, end, err
}

// dropPaths deletes the path entries in drop whose job is still pruned
// (one may have a new job by now) and returns how many it deleted.
func (s *Store) dropPaths(drop [][]byte) (int, error) {
	if len(drop) == 0 {
		return 0, nil
	}
	removed := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		paths, jobs := tx.Bucket(bucketPaths), tx.Bucket(bucketJobs)
		for _, p := range drop {
			var pe pathEntry
			v := paths.Get(p)
			if v == nil || json.Unmarshal(v, &pe) != nil || jobs.Get(u64(pe.Job)) != nil {
				continue
			}
			if err := paths.Delete(p); err != nil {
				return err
			}
			removed++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return removed, nil
}
