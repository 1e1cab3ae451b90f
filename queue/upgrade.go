package queue

import (
	"encoding/json"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// upgrade brings a state file written with schema version `from` to
// SchemaVersion, in init's transaction: a crash leaves the old version and
// the next open upgrades again from the start.
func (s *Store) upgrade(tx *bolt.Tx, from uint64) error {
	if from < 2 {
		// Version 2 keeps counts that version 1 computed on every Stats
		// call. Counting the tombstones reads every sha256 entry once, here,
		// so that no periodic read ever has to again.
		if from > 0 {
			s.log.Info().Uint64("from", from).Int("to", SchemaVersion).
				Msg("upgrading the state file: counting its jobs and tombstones once")
		}
		stages, tombstones := recount(tx)
		meta := tx.Bucket(bucketMeta)
		for stg, n := range stages {
			if err := meta.Put(stageCountKey(stg), u64(uint64(n))); err != nil {
				return err
			}
		}
		if err := meta.Put(keyTombstones, u64(uint64(tombstones))); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Put(keySchema, u64(SchemaVersion))
}

// recount counts, from the data, what the meta counters hold: the keys of
// each stage bucket and the pruned entries of the sha256 index. It reads
// the whole index: only the upgrade and tests call it.
func recount(tx *bolt.Tx) (map[state.Stage]int, int) {
	stages := make(map[state.Stage]int, len(state.Stages))
	for _, stg := range state.Stages {
		stages[stg] = tx.Bucket(bucketStages).Bucket([]byte(stg)).Stats().KeyN
	}
	tombstones := 0
	c := tx.Bucket(bucketSHA).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		// An entry that does not decode dedupes nothing: it is not counted,
		// as version 1's Stats did not count it.
		var he hashEntry
		if json.Unmarshal(v, &he) == nil && he.Pruned {
			tombstones++
		}
	}
	return stages, tombstones
}
