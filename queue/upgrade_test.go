package queue

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// checkCounts compares the counters Stats reads with a count of the data
// they stand for.
func checkCounts(t *testing.T, s *Store) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		stages, tombstones := recount(tx)
		for _, stg := range state.Stages {
			if got := count(tx, stageCountKey(stg)); got != stages[stg] {
				t.Errorf("count of %s = %d, the bucket holds %d", stg, got, stages[stg])
			}
		}
		if got := count(tx, keyTombstones); got != tombstones {
			t.Errorf("tombstone count = %d, the index holds %d", got, tombstones)
		}
		if jobs := tx.Bucket(bucketJobs).Stats().KeyN; jobs != sum(stages) {
			t.Errorf("%d job records, %d in the stage buckets", jobs, sum(stages))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func sum(m map[state.Stage]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestCountsFollowEveryChange drives a store through random legal moves
// (enqueue, every transition the table allows, content dedupe against live
// and pruned owners, retry, resolve, retention, reopen) and checks after
// each that the counters equal a full count. The seeds are fixed, so the
// walks, and the check that they visited every kind of change, are the same
// on every run.
func TestCountsFollowEveryChange(t *testing.T) {
	t.Parallel()
	seen := map[string]int{}
	for seed := range uint64(5) {
		countsWalk(t, seed, seen)
	}
	t.Logf("changes visited: %v", seen)
	for _, k := range []string{"enqueue", "known", "commit", "wait", "duplicate", "duplicate-of-pruned",
		"failed", "held", "retry", "resolve", "retry-failed", "pruned", "reopen"} {
		if seen[k] == 0 {
			t.Errorf("no %s in the walks: they prove less than they claim", k)
		}
	}
}

func countsWalk(t *testing.T, seed uint64, seen map[string]int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	clk := newClock()
	dir := t.TempDir()
	o := Options{Now: clk.Now, NoSync: true, DedupeWait: time.Second,
		Retention: Retention{MaxFinished: 8, MaxAge: 6 * time.Hour}, PruneEvery: 3}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	files := 0
	for step := range 1500 {
		clk.Add(time.Duration(rng.IntN(int(2 * time.Minute))))
		switch op := rng.IntN(40); {
		case op < 2:
			var cs []Candidate
			for range 1 + rng.IntN(2) {
				// Some paths come again, changed or not.
				if files > 0 && rng.IntN(3) == 0 {
					cs = append(cs, cand(fmt.Sprintf("/w/%d.ply", rng.IntN(files)), int64(1+rng.IntN(2)), 1))
					continue
				}
				cs = append(cs, cand(fmt.Sprintf("/w/%d.ply", files), 1, 1))
				files++
			}
			created, err := s.EnqueueBatch(t.Context(), cs)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range created {
				seen[map[bool]string{true: "enqueue", false: "known"}[c]]++
			}
		case op < 34:
			j, ok, err := s.Claim(clk.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				continue
			}
			// Every legal move, failure one time in five: else few jobs
			// would get as far as publishing.
			var next []state.Stage
			for _, to := range state.Stages {
				if state.CanMove(j.Stage, to) && (to != state.Failed || rng.IntN(5) == 0) {
					next = append(next, to)
				}
			}
			to := next[rng.IntN(len(next))]
			from := j.Stage
			if err := j.Move(to, clk.Now()); err != nil {
				t.Fatal(err)
			}
			j.NextAttempt = clk.Now()
			if to == state.Ready && from != state.Ready {
				// Few distinct contents: dedupe happens often.
				j.SHA256 = fmt.Sprint("content-", rng.IntN(8))
			}
			if to == state.Processing {
				j.SplatID = fmt.Sprint("splat-", j.ID)
			}
			got, err := s.Commit(j, from)
			if err != nil {
				t.Fatalf("seed %d step %d: commit %s→%s: %v", seed, step, from, to, err)
			}
			s.Release(j.ID)
			seen["commit"]++
			switch {
			case to == state.Ready && got.Stage == from:
				seen["wait"]++
			case got.DuplicateOf != 0 && to == state.Ready:
				if _, err := s.Get(got.DuplicateOf); err != nil {
					seen["duplicate-of-pruned"]++
				} else {
					seen["duplicate"]++
				}
			case got.Stage == state.Failed || got.Stage == state.Held:
				seen[string(got.Stage)]++
			}
		case op < 37:
			for _, stg := range []state.Stage{state.Failed, state.Held} {
				list, err := s.List(Filter{Stages: []state.Stage{stg}, Limit: 1})
				if err != nil {
					t.Fatal(err)
				}
				if len(list) == 0 {
					continue
				}
				if stg == state.Held && rng.IntN(2) == 0 {
					_, err = s.Resolve(list[0].ID, "found-on-the-account")
					seen["resolve"]++
				} else {
					_, err = s.Retry(list[0].ID)
					seen["retry"]++
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		case op < 38:
			n, err := s.RetryFailed()
			if err != nil {
				t.Fatal(err)
			}
			seen["retry-failed"] += n
		case op < 39:
			n, err := s.Prune()
			if err != nil {
				t.Fatal(err)
			}
			seen["pruned"] += n
		default:
			s.Close()
			if s, err = Open(dir, o); err != nil {
				t.Fatal(err)
			}
			seen["reopen"]++
		}
		checkCounts(t, s)
		if t.Failed() {
			t.Fatalf("seed %d: counts wrong after step %d", seed, step)
		}
	}
}

// TestUpgradeFromV1 opens a version-1 file (today's layout without the
// counters) and checks that the upgrade counts what version 1's Stats
// counted on every call.
func TestUpgradeFromV1(t *testing.T) {
	t.Parallel()
	clk := newClock()
	dir := t.TempDir()
	o := Options{Now: clk.Now, Retention: Retention{MaxFinished: 2}, PruneEvery: 1}
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		mustEnqueue(t, s, cand(fmt.Sprintf("/w/%d.ply", i), 1, 1), true)
	}
	for i := range 5 {
		j := claim(t, s, clk.Now())
		j = advance(t, s, j, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = fmt.Sprint("h", i) })
		if i < 4 {
			for _, to := range []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
				j = advance(t, s, j, to, clk.Now(), func(j *state.Job) { j.SplatID = fmt.Sprint(i) })
			}
		}
		s.Release(j.ID)
		clk.Add(time.Minute)
	}
	want, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if want.Tombstones != 2 || want.Stages[state.Done] != 2 || want.Stages[state.Ready] != 1 || want.Stages[state.Queued] != 1 {
		t.Fatalf("before the downgrade: %+v", want)
	}
	s.Close()

	// Make it a version 1 file, with an index entry that does not decode
	// (version 1's Stats skipped those).
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var counters [][]byte
		c := meta.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if string(k) != string(keySchema) {
				counters = append(counters, slices.Clone(k))
			}
		}
		if len(counters) != len(state.Stages)+1 {
			t.Errorf("%d counters in meta, want %d", len(counters), len(state.Stages)+1)
		}
		for _, k := range counters {
			if err := meta.Delete(k); err != nil {
				return err
			}
		}
		if err := tx.Bucket(bucketSHA).Put([]byte("garbage"), []byte("{not json")); err != nil {
			return err
		}
		return meta.Put(keySchema, u64(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s = open(t, dir, o)
	got, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got.Stages, want.Stages) || got.Jobs != want.Jobs || got.Tombstones != want.Tombstones {
		t.Errorf("after the upgrade: %+v, want %+v", got, want)
	}
	checkCounts(t, s)
	_ = s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keySchema); string(v) != string(u64(SchemaVersion)) {
			t.Errorf("schema record after the upgrade: %x", v)
		}
		return nil
	})
}

// TestSeedTombstones checks that seeded jobs are what retention leaves: the
// content stays deduplicated, the path Known, the count right.
func TestSeedTombstones(t *testing.T) {
	t.Parallel()
	// SeedTombstones opens the store on the real clock (and applies the
	// retention age on it): this test's jobs must not look a year old.
	clk := &clock{t: time.Now()}
	dir := t.TempDir()
	if err := SeedTombstones(dir, "/seeded", 1000); err != nil {
		t.Fatal(err)
	}
	s := open(t, dir, Options{Now: clk.Now})
	if st, err := s.Stats(); err != nil || st.Tombstones != 1000 || st.Jobs != 0 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
	checkCounts(t, s)
	if !s.Known("/seeded/seed-0000000007.ply", 1<<20, time.Unix(1700000000, 0)) {
		t.Error("a seeded path is not Known")
	}
	mustEnqueue(t, s, cand("/w/copy-of-7.ply", 1, 1), true)
	j := claim(t, s, clk.Now())
	if j.ID != 1001 {
		t.Errorf("first job after the seed has id %d, want 1001", j.ID)
	}
	j = advance(t, s, j, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = fmt.Sprintf("%064x", 7) })
	if j.Stage != state.Done || j.DuplicateOf != 7 || j.SplatID != "seed7" {
		t.Errorf("copy of seeded content: %+v", j)
	}
	s.Release(j.ID)
	s.Close()

	// Again on the same state: new ids, new entries.
	if err := SeedTombstones(dir, "/seeded", 10); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, Options{Now: clk.Now})
	if st, err := s.Stats(); err != nil || st.Tombstones != 1010 || st.Jobs != 1 {
		t.Fatalf("Stats after the second seed = %+v, %v", st, err)
	}
	if !s.Known("/seeded/seed-0000001002.ply", 1<<20, time.Unix(1700000000, 0)) {
		t.Error("a path of the second seed is not Known")
	}
	checkCounts(t, s)
}
