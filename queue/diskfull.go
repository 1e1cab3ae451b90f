package queue

import (
	bolt "go.etcd.io/bbolt"
)

// lightenOver is the record size above which lighten rewrites a finished
// job's record without its publish settings (a quarter of a page).
const lightenOver = 1 << 10

// lighten rewrites finished job id's record without its publish settings
// when they make it large, in a transaction of its own, so that Forget's
// commit on a full disk finds the large record's pages free
// (docs/architecture.md, "The state file").
func (s *Store) lighten(id uint64) {
	_ = s.db.Update(func(tx *bolt.Tx) error {
		raw := tx.Bucket(bucketJobs).Get(u64(id))
		if len(raw) < lightenOver {
			return nil
		}
		j, err := decodeJob(id, raw)
		if err != nil || !j.Stage.Finished() || j.Params.Settings == nil {
			return nil
		}
		j.Params.Settings = nil
		return putJob(tx, j)
	})
}
