package queue

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// RecoverReport is what Recover did.
type RecoverReport struct {
	// Aside is where the damaged file now is ("" when there was none).
	Aside string
	// Problems (and More) are what the check found in it.
	Problems []string
	More     int
	// Jobs is the number of job records salvaged; Unreadable the ids of
	// those found but not decodable, and Lost the ids the indexes name
	// whose record was not found: both are left out (their files are found
	// again, and adopted when a receipt proves them published).
	Jobs       int
	Unreadable []uint64
	Lost       []uint64
	// Tombstones are the pruned contents still deduplicated; Paths the
	// path records kept (DroppedPaths: those naming a job that is gone and
	// left no tombstone, so that its file is looked at again).
	Tombstones, Paths, DroppedPaths int
}

// salvage is what a walk of a damaged file could read.
type salvage struct {
	jobs     map[uint64][]byte // id → record, as stored
	shas     map[string]hashEntry
	paths    map[string]pathEntry
	indexed  map[uint64]bool // ids the stage, due and finished indexes name
	sequence uint64
	schema   uint64
	fromTree map[uint64]bool // the jobs bucket was found; in orphans: the ids it held
	orphan   map[uint64]bool // ids found only outside the tree
}

// Recover rebuilds the state file in dir from what can still be read of
// it: the damaged file is kept aside as splatd.db.damaged-TIME (never
// deleted), every job record that bbolt's pages still hold and that
// decodes is kept as it was, the indexes are derived from the jobs again,
// and the dedupe tombstones and path records are kept where they are
// consistent with the jobs. No splatd may be running (ErrLocked). A
// missing or empty file becomes a new store. The caller adopts the
// receipts in the watch folders afterwards: they restore what was lost.
func Recover(dir string, timeout time.Duration, now time.Time) (RecoverReport, error) {
	var rep RecoverReport
	path := filepath.Join(dir, FileName)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, newStore(dir, &salvage{})
	}
	if err != nil {
		return rep, err
	}
	defer f.Close()
	if err := lockFile(f, true, timeout); errors.Is(err, bolt.ErrTimeout) {
		return rep, &lockedError{dir: dir}
	} else if err != nil {
		return rep, fmt.Errorf("lock %s: %w", path, err)
	}
	chk, err := checkFile(f, path, false)
	if err != nil {
		return rep, err
	}
	rep.Problems, rep.More = chk.Problems, chk.More
	sv := &salvage{jobs: map[uint64][]byte{}, shas: map[string]hashEntry{}, paths: map[string]pathEntry{}, indexed: map[uint64]bool{}, orphan: map[uint64]bool{}}
	if chk.Size > 0 {
		if pf, _ := openPages(f, chk.Size); pf != nil && pf.meta.pageSize > 0 {
			sv.read(pf)
		}
	}
	if sv.schema > SchemaVersion {
		return rep, fmt.Errorf("%s has schema version %d, newer than this splatd's %d: recover it with a newer splatd", path, sv.schema, SchemaVersion)
	}
	sv.tidy(&rep)
	tmpDir := filepath.Join(dir, FileName+".recovering")
	if err := os.RemoveAll(tmpDir); err != nil {
		return rep, err
	}
	if err := os.Mkdir(tmpDir, 0o700); err != nil {
		return rep, err
	}
	defer os.RemoveAll(tmpDir)
	if err := newStore(tmpDir, sv); err != nil {
		return rep, fmt.Errorf("rebuild: %w", err)
	}
	// The damaged file keeps its bytes under a second name before the new
	// file takes its place: at every moment splatd.db is one or the other.
	rep.Aside = fmt.Sprintf("%s.damaged-%s", path, now.UTC().Format("20060102T150405Z"))
	if err := keepAside(f, path, rep.Aside); err != nil {
		return rep, err
	}
	if err := syncDir(dir); err != nil {
		return rep, err
	}
	f.Close() // the lock: Windows renames no file over an open one
	if err := os.Rename(filepath.Join(tmpDir, FileName), path); err != nil {
		return rep, err
	}
	return rep, syncDir(dir)
}

// keepAside gives the damaged file at path a second name, aside: a hard
// link, or a copy where the file system has none.
func keepAside(f *os.File, path, aside string) error {
	if err := os.Link(path, aside); err == nil {
		return nil
	}
	out, err := os.OpenFile(aside, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("keep the damaged file aside: %w", err)
	}
	_, err = io.Copy(out, io.NewSectionReader(f, 0, 1<<62))
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}

// read walks pf and keeps every record it can read.
func (sv *salvage) read(pf *pageFile) {
	w := &walker{pf: pf}
	w.bucket = func(b []string, seq uint64) {
		if len(b) == 1 && b[0] == string(bucketJobs) {
			sv.sequence = seq
			sv.fromTree = map[uint64]bool{} // the jobs bucket is there
		}
	}
	w.value = func(b []string, k, v []byte) {
		switch {
		case len(b) == 1 && b[0] == string(bucketJobs) && len(k) == 8:
			sv.jobs[idOf(k)] = slices.Clone(v)
		case len(b) == 1 && b[0] == string(bucketSHA):
			var he hashEntry
			if json.Unmarshal(v, &he) == nil {
				sv.shas[string(k)] = he
			}
		case len(b) == 1 && b[0] == string(bucketPaths):
			var pe pathEntry
			if json.Unmarshal(v, &pe) == nil {
				sv.paths[string(k)] = pe
			}
		case len(b) == 1 && b[0] == string(bucketMeta) && string(k) == string(keySchema) && len(v) == 8:
			sv.schema = binary.BigEndian.Uint64(v)
		case len(b) == 2 && b[0] == string(bucketStages) && len(k) == 8:
			sv.indexed[idOf(k)] = true
		case len(b) == 1 && (b[0] == string(bucketDue) || b[0] == string(bucketFinished)) && len(k) == 16:
			_, id := splitTimeKey(k)
			sv.indexed[id] = true
		}
	}
	w.walk()
	if w.hurt[""] || w.hurt[string(bucketJobs)] || sv.fromTree == nil {
		sv.orphans(pf, w.reached)
	}
}

// orphans reads the done jobs that only pages the walk could not reach
// still hold (a branch or the root lost, or beyond a cut): a leaf page that
// is itself, whose keys are job ids and whose values decode as those jobs.
// Such a page may be an older copy of the page (bbolt copies a page on
// write), so only done jobs are taken, the latest version of each, and
// only for ids the walk did not find: evidence that a file was published,
// never a stage to resume from.
func (sv *salvage) orphans(pf *pageFile, reached map[uint64]string) {
	sv.fromTree = map[uint64]bool{}
	for id := range sv.jobs {
		sv.fromTree[id] = true
	}
	found := map[uint64]state.Job{}
	for id := uint64(2); id < pf.meta.hwm; id++ {
		if _, ok := reached[id]; ok {
			continue
		}
		p, err := pf.page(id)
		if err != nil || flags(p) != flagLeaf {
			continue
		}
		w := &walker{pf: pf, reached: map[uint64]string{}, value: func(_ []string, k, v []byte) {
			if len(k) != 8 {
				return
			}
			j, err := state.Unmarshal(v)
			if err != nil || j.ID != idOf(k) || j.Stage != state.Done {
				return
			}
			if old, ok := found[j.ID]; !ok || j.UpdatedAt.After(old.UpdatedAt) {
				found[j.ID] = j
				sv.orphanRaw(j.ID, slices.Clone(v))
			}
		}}
		w.leaf(nil, fmt.Sprintf("page %d", id), p, 0, nil, nil)
	}
}

// orphanRaw keeps the record of job id found outside the tree, unless the
// tree held one.
func (sv *salvage) orphanRaw(id uint64, v []byte) {
	if !sv.fromTree[id] {
		sv.jobs[id] = v
		sv.orphan[id] = true
	}
}

// tidy drops what cannot be kept: records that do not decode, and index
// entries that name a job that is gone.
func (sv *salvage) tidy(rep *RecoverReport) {
	for _, id := range slices.Sorted(maps.Keys(sv.jobs)) {
		j, err := state.Unmarshal(sv.jobs[id])
		if err != nil || j.ID != id || !j.Stage.Valid() {
			delete(sv.jobs, id)
			rep.Unreadable = append(rep.Unreadable, id)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(sv.indexed)) {
		if _, ok := sv.jobs[id]; !ok && !slices.Contains(rep.Unreadable, id) {
			rep.Lost = append(rep.Lost, id)
		}
	}
	pruned := map[uint64]bool{}
	for _, he := range sv.shas {
		if he.Pruned && sv.orphan[he.Job] {
			delete(sv.jobs, he.Job) // an old copy of a job retention pruned
		}
	}
	for sha, he := range sv.shas {
		switch _, ok := sv.jobs[he.Job]; {
		case he.Pruned:
			pruned[he.Job] = true
			rep.Tombstones++
		case !ok:
			delete(sv.shas, sha) // its owner is gone: the next job with the content takes it
		}
	}
	for p, pe := range sv.paths {
		// A path whose job is gone keeps its file Known only when the job
		// was pruned done; any other would hide a file whose job was lost.
		if _, ok := sv.jobs[pe.Job]; !ok && !pruned[pe.Job] {
			delete(sv.paths, p)
			rep.DroppedPaths++
		}
	}
	rep.Jobs, rep.Paths = len(sv.jobs), len(sv.paths)
}

// newStore makes the state file in dir (which holds none) from sv: the
// records as salvaged, the indexes and counts derived from the jobs, the
// missing dedupe owners and path records added back from the jobs.
func newStore(dir string, sv *salvage) error {
	s, err := Open(dir, Options{NoSync: true, Retention: Retention{MaxFinished: -1, MaxAge: -1}})
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		seq := sv.sequence
		added := map[string]bool{}
		jobs, shas, paths := tx.Bucket(bucketJobs), tx.Bucket(bucketSHA), pathIndex(tx)
		for _, id := range slices.Sorted(maps.Keys(sv.jobs)) {
			j, err := state.Unmarshal(sv.jobs[id])
			if err != nil {
				return err
			}
			if err := jobs.Put(u64(id), sv.jobs[id]); err != nil {
				return err
			}
			if err := index(tx, j, true); err != nil {
				return err
			}
			seq = max(seq, id)
			// Ids grow with time: the last job of a path is its record.
			if _, ok := sv.paths[j.Path]; !ok || added[j.Path] {
				sv.paths[j.Path] = pathEntry{V: 1, Job: id, Size: j.Size, MTime: j.ModTime.UnixNano()}
				added[j.Path] = true
			}
			if _, ok := sv.shas[j.SHA256]; !ok && ownsContent(j) {
				sv.shas[j.SHA256] = hashEntry{V: 1, Job: id}
			}
		}
		for sha, he := range sv.shas {
			if err := putJSON(shas, []byte(sha), he); err != nil {
				return err
			}
			if he.Pruned {
				if err := addCount(tx, keyTombstones, 1); err != nil {
					return err
				}
			}
			seq = max(seq, he.Job)
		}
		for p, pe := range sv.paths {
			if err := putJSON(paths, []byte(p), pe); err != nil {
				return err
			}
			seq = max(seq, pe.Job)
		}
		for id := range sv.indexed {
			seq = max(seq, id)
		}
		return jobs.SetSequence(seq)
	})
	if err == nil {
		err = s.db.Sync()
	}
	return errors.Join(err, s.Close())
}

// ownsContent reports whether j, found without its content's dedupe
// entry, holds it as Commit would have left it: hashed, not a duplicate,
// and not given up.
func ownsContent(j state.Job) bool {
	return j.SHA256 != "" && j.DuplicateOf == 0 && j.Stage != state.Queued && j.Stage != state.Failed && j.Stage != state.Canceled
}
