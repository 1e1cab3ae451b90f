package queue

import (
	"fmt"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// seedBatch is how many jobs one SeedTombstones transaction writes.
const seedBatch = 100_000

// SeedTombstones is for benchmarks; splatd never calls it. It adds n finished
// jobs to the state in dir as retention leaves them once pruned: each a
// tombstone in the sha256 index (its id as 64 hex digits, splat id
// "seed<id>"), a path entry for pathDir/seed-<id>.ply (1 MiB, mtime Unix
// 1700000000) and a step of the tombstone count, in big transactions with
// one fsync at the end. dir must not be open in any process; job ids
// continue the store's sequence, so it may run again on the same state.
func SeedTombstones(dir, pathDir string, n int) error {
	// About 300 bytes of pages per job: map them at once rather than
	// remapping (and copying every node of the transaction) as the file grows.
	s, err := Open(dir, Options{NoSync: true, mmapSize: min(n, 4<<20) * 512})
	if err != nil {
		return err
	}
	defer s.Close()
	at := time.Now()
	mtime := time.Unix(1700000000, 0).UnixNano()
	for done := 0; done < n; {
		m := min(seedBatch, n-done)
		err := s.db.Update(func(tx *bolt.Tx) error {
			jobs, paths, shas := tx.Bucket(bucketJobs), tx.Bucket(bucketPaths), tx.Bucket(bucketSHA)
			first := jobs.Sequence() + 1
			if err := jobs.SetSequence(first + uint64(m) - 1); err != nil {
				return err
			}
			// Job ids and both keys grow together: bbolt appends.
			for id := first; id < first+uint64(m); id++ {
				splat := fmt.Sprintf("seed%d", id)
				j := state.Job{ID: id, Splat: state.Splat{SplatID: splat, SplatHash: "h" + splat, ViewerURL: "https://superspl.at/view?id=h" + splat},
					UpdatedAt: at}
				if err := putJSON(shas, fmt.Appendf(nil, "%064x", id), tombstone(j)); err != nil {
					return err
				}
				p := filepath.Join(pathDir, fmt.Sprintf("seed-%010d.ply", id))
				if err := putJSON(paths, []byte(p), pathEntry{V: 1, Job: id, Size: 1 << 20, MTime: mtime}); err != nil {
					return err
				}
			}
			return addCount(tx, keyTombstones, int64(m))
		})
		if err != nil {
			return fmt.Errorf("seed tombstones: %w", err)
		}
		done += m
	}
	return s.db.Sync()
}
