// Package queue is splatd's durable job store: a bbolt file in the state
// directory holding every job, the indexes that make enqueue idempotent and
// content dedupe exact, and the due-time order in which workers claim jobs.
// Every method is one transaction; a commit is fsynced before it returns, so
// a job's last committed stage survives kill -9.
package queue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// The bucket tree (docs/architecture.md, "The state file"), created
// together in one transaction at open: a store is fully laid out or not at all.
var (
	bucketMeta     = []byte("meta")
	bucketJobs     = []byte("jobs")
	bucketDue      = []byte("due")
	bucketStages   = []byte("stages")
	bucketFinished = []byte("finished")
	bucketSHA      = []byte("sha256")
	bucketPaths    = []byte("paths")

	keySchema     = []byte("schema")
	keyTombstones = []byte("count/tombstones")
)

// pathsFill is how full a split leaves the paths index's pages. Its keys
// arrive in ascending runs (a folder's files in name order), which
// bbolt's default of half full would leave half empty.
const pathsFill = 0.9

// pathIndex is tx's paths bucket, its pages split at pathsFill.
func pathIndex(tx *bolt.Tx) *bolt.Bucket {
	b := tx.Bucket(bucketPaths)
	b.FillPercent = pathsFill
	return b
}

// stageCountKey is the meta key counting the jobs in stage.
func stageCountKey(stage state.Stage) []byte { return []byte("count/" + stage) }

// SchemaVersion is the layout version this code reads and writes. Opening a
// file written with a newer version fails rather than corrupting it; an
// older one is upgraded at open (upgrade.go).
//
//	1  the bucket tree without counters
//	2  meta/count/*: job counts per stage and the tombstone count, kept in
//	   the transaction that changes them, so Stats reads no history
const SchemaVersion = 2

// FileName is the bbolt file inside the state directory.
const FileName = "splatd.db"

// Errors returned by the store.
var (
	// ErrNotFound: no job with that id.
	ErrNotFound = errors.New("job not found")
	// ErrLocked: another process holds the state file. The returned error
	// reads "another splatd is using DIR" and matches ErrLocked with errors.Is.
	ErrLocked = errors.New("another splatd is using the state directory")
	// ErrConflict: Commit's expected stage is not the stored one; somebody
	// else (an operator's retry) moved the job in the meantime.
	ErrConflict = state.ErrStale
)

type lockedError struct{ dir string }

func (e *lockedError) Error() string        { return "another splatd is using " + e.dir }
func (e *lockedError) Is(target error) bool { return target == ErrLocked }

// Retention bounds the finished (done and failed) records kept in full.
// A pruned done job leaves a small tombstone in the sha256 index (splat id,
// viewer URL, time) so its content is still never published twice, and its
// path entry so an unchanged file is still Known.
type Retention struct {
	// MaxFinished is the number of finished jobs kept in full; older ones
	// are pruned. Zero means 5000; negative means no limit.
	MaxFinished int
	// MaxAge prunes finished jobs older than this. Zero means 30 days;
	// negative means no limit.
	MaxAge time.Duration
}

// Options configures Open. The zero value is usable.
type Options struct {
	// LockTimeout is how long Open waits for the file lock held by another
	// process before failing with ErrLocked. Zero means 3 s.
	LockTimeout time.Duration
	// Retention of finished jobs; applied at open and every PruneEvery
	// finished jobs.
	Retention Retention
	// PruneEvery is the number of jobs that must finish between two
	// retention passes. Zero means 100.
	PruneEvery int
	// DedupeWait is how long a job whose content another job is still
	// publishing waits before it checks again. Zero means 30 s.
	DedupeWait time.Duration
	// NoSync skips fsync on commit. Only for benchmarks and tests that do
	// not crash: without fsync a power loss can lose committed stages.
	NoSync bool
	// Identity is this daemon's name in a fleet (daemons sharing one
	// folder): the claim order of queued jobs is a rendezvous hash of each
	// file's key and Identity (see Claim), so that daemons with different
	// identities start on different files. Empty: the plain due order.
	Identity string
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger receives open, recovery and prune lines; the caller scopes it
	// (component=queue).
	Logger zerolog.Logger
	// OnDamaged, when set, is called once, on its own goroutine, when bbolt
	// panics on the open store (a damaged page met at first use): from then
	// on every method fails with that *DamagedError.
	OnDamaged func(*DamagedError)
	// RecoverCommand is the command a DamagedError tells the operator to
	// run, as they would type it; empty: "splatd state recover".
	RecoverCommand string

	// mmapSize is bbolt's initial mmap size: SeedTombstones sets it so that
	// a million writes do not remap the file as it grows.
	mmapSize int
}

func (o *Options) fill() {
	if o.LockTimeout <= 0 {
		o.LockTimeout = 3 * time.Second
	}
	if o.Retention.MaxFinished == 0 {
		o.Retention.MaxFinished = 5000
	}
	if o.Retention.MaxAge == 0 {
		o.Retention.MaxAge = 30 * 24 * time.Hour
	}
	if o.PruneEvery <= 0 {
		o.PruneEvery = 100
	}
	if o.DedupeWait <= 0 {
		o.DedupeWait = 30 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Store is the job store. Its methods are safe for concurrent use. Only one
// process may open a state directory at a time (bbolt's file lock), which is
// what lets the claimed set live in memory.
type Store struct {
	db    *guardedDB
	dir   string
	o     Options
	log   zerolog.Logger
	fresh string // why Open started an empty store ("": it opened one)

	mu        sync.Mutex
	claimed   map[uint64]struct{}
	finished  int       // jobs finished since the last retention pass
	lastClaim time.Time // the latest now a Claim was given (clock.go)

	batches atomic.Uint64 // KnownBatch calls, for its page release

	// unreadable holds the ids of the job records found undecodable
	// (unreadable.go), each reported once; badMu guards it and is never
	// held while another lock is taken.
	badMu      sync.Mutex
	unreadable map[uint64]struct{}
}

// Open opens (creating if needed) the store in directory dir, lays out the
// buckets, checks the schema version and recovers in-flight jobs: since
// claims are not persisted every non-final job is runnable again from its
// last committed stage, and a job found in Publishing is marked Uncertain
// because its publish call may or may not have reached the API.
func Open(dir string, o Options) (*Store, error) {
	o.fill()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	path := filepath.Join(dir, FileName)
	fresh, err := inspect(dir, path, o.RecoverCommand, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	bdb, file, err := openBolt(path, o.RecoverCommand, &bolt.Options{
		Timeout: o.LockTimeout,
		// The freelist is written with each commit: rebuilding it at open
		// reads the whole file (docs/architecture.md, "The state file").
		NoFreelistSync:  false,
		FreelistType:    bolt.FreelistMapType,
		NoSync:          o.NoSync,
		InitialMmapSize: o.mmapSize,
	})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, &lockedError{dir: dir}
	}
	if errors.Is(err, ErrDamaged) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// A new file's name lasts a power cut only once its folder is synced.
	if fresh != "" {
		if err := syncDir(dir); err != nil {
			bdb.Close()
			return nil, err
		}
	}
	db := &guardedDB{DB: bdb, file: file, path: path, command: o.RecoverCommand}
	db.release = newReleaser(bdb, func(fn func(*bolt.Tx) error) error { return db.guarded("a read", bdb.View, fn) })
	s := &Store{db: db, dir: dir, o: o, log: o.Logger, fresh: fresh,
		claimed: make(map[uint64]struct{}), unreadable: make(map[uint64]struct{})}
	if err := s.init(); err != nil {
		db.Close()
		return nil, err
	}
	if _, err := s.Prune(); err != nil {
		db.Close()
		return nil, err
	}
	// Damage met in Open is its error; from here on, the caller's news.
	db.onDamaged = o.OnDamaged
	return s, nil
}

func (s *Store) init() error {
	var uncertain, moved int
	err := s.db.Update(func(tx *bolt.Tx) error {
		if err := s.layout(tx); err != nil {
			return err
		}
		now := s.o.Now()
		var err error
		if uncertain, err = s.markUncertain(tx, now); err != nil {
			return err
		}
		moved, err = capWaitsTx(tx, now, 0, s.skip)
		return err
	})
	if err != nil {
		return err
	}
	if moved > 0 {
		s.log.Warn().Int("jobs", moved).Msg("the clock is behind the last commits: waiting jobs are due again their own wait from now")
	}
	if uncertain > 0 {
		s.log.Warn().Int("jobs", uncertain).Msg("found publish calls with unknown outcome")
	}
	return nil
}

// layout creates the bucket tree and upgrades its schema to SchemaVersion.
func (s *Store) layout(tx *bolt.Tx) error {
	for _, name := range [][]byte{bucketMeta, bucketJobs, bucketDue, bucketStages, bucketFinished, bucketSHA, bucketPaths} {
		if _, err := tx.CreateBucketIfNotExists(name); err != nil {
			return fmt.Errorf("create bucket %s: %w", name, err)
		}
	}
	st := tx.Bucket(bucketStages)
	for _, stg := range state.Stages {
		if _, err := st.CreateBucketIfNotExists([]byte(stg)); err != nil {
			return fmt.Errorf("create bucket stages/%s: %w", stg, err)
		}
	}
	// A file without a version record is new: its buckets were just
	// created, and upgrading it from 0 counts nothing.
	var version uint64
	if v := tx.Bucket(bucketMeta).Get(keySchema); v != nil {
		if len(v) != 8 {
			return fmt.Errorf("state file %s: bad schema version record", s.dir)
		}
		version = binary.BigEndian.Uint64(v)
		if version > SchemaVersion {
			return fmt.Errorf("state file in %s has schema version %d, newer than this splatd's %d: use a newer splatd", s.dir, version, SchemaVersion)
		}
	}
	if version < SchemaVersion {
		return s.upgrade(tx, version)
	}
	return nil
}

// markUncertain marks the legacy publish intents found at open, whose
// outcome is unknown, and returns how many it marked. Under v1 a complete
// whose answer was lost is simply sent again: nothing is uncertain.
func (s *Store) markUncertain(tx *bolt.Tx, now time.Time) (int, error) {
	n := 0
	// Collect first, write after: never modify a bucket under a live cursor.
	for _, id := range stageIDs(tx, state.Publishing) {
		j, err := getJob(tx, id)
		if s.skip(err) {
			continue
		}
		if err != nil {
			return n, err
		}
		if j.Uncertain || j.Protocol == state.ProtocolV1 {
			continue
		}
		j.Uncertain = true
		j.UpdatedAt = now
		if err := putJob(tx, j); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// Fresh says why Open started an empty store (no state file, or an empty
// one), or "" when it opened an existing one.
func (s *Store) Fresh() string { return s.fresh }

// Close closes the bbolt file and releases the lock.
func (s *Store) Close() error { return s.db.Close() }

// Dir is the state directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// index adds (add=true) or removes j's entries in the due, stages and
// finished buckets, as derived from its stage, NextAttempt and UpdatedAt.
func index(tx *bolt.Tx, j state.Job, add bool) error {
	id := u64(j.ID)
	op := func(b *bolt.Bucket, k []byte) error {
		if add {
			return b.Put(k, nil)
		}
		return b.Delete(k)
	}
	sb := tx.Bucket(bucketStages).Bucket([]byte(j.Stage))
	if sb == nil {
		return fmt.Errorf("job %d: unknown stage %q", j.ID, j.Stage)
	}
	// The stage's counter follows the keys of its bucket exactly: it moves
	// only when the key really appears or goes.
	if has(sb, id) != add {
		if err := op(sb, id); err != nil {
			return err
		}
		delta := int64(1)
		if !add {
			delta = -1
		}
		if err := addCount(tx, stageCountKey(j.Stage), delta); err != nil {
			return err
		}
	}
	if !j.Stage.Final() {
		if err := op(tx.Bucket(bucketDue), timeKey(j.NextAttempt, j.ID)); err != nil {
			return err
		}
	}
	if j.Stage.Finished() {
		if err := op(tx.Bucket(bucketFinished), timeKey(j.UpdatedAt, j.ID)); err != nil {
			return err
		}
	}
	return nil
}
