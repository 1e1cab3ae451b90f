package queue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// TestAdoptBatch: an adopted file is a done, finalized job that is Known
// (the watcher skips it), owns its content (a copy elsewhere is a
// duplicate), is never runnable, and is adopted only once.
func TestAdoptBatch(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	ctx := context.Background()
	a := Adoption{Path: "/in/a.ply", Root: "/in", Size: 10, ModTime: time.Unix(100, 0), SHA256: "aaa",
		SplatID: "7", URL: "https://v/7", Title: "a", Format: "sog", Receipt: "/in/a.ply.splat.json"}
	jobs, err := s.AdoptBatch(ctx, []Adoption{a, {Path: "/in/b.ply", Size: 3, ModTime: time.Unix(100, 0), SHA256: "bbb"}})
	if err != nil {
		t.Fatal(err)
	}
	j := jobs[0]
	if j.ID == 0 || j.Stage != state.Done || !j.Adopted || !j.Finalized || j.SplatID != "7" || j.SHA256 != "aaa" || j.CompletedAt == nil {
		t.Fatalf("adopted job = %+v", j)
	}
	if !s.Known(a.Path, a.Size, a.ModTime) {
		t.Error("an adopted file is not Known: the watcher would hand it over again")
	}
	if _, ok, _ := s.Claim(clk.Now().Add(time.Hour)); ok {
		t.Error("an adopted job is runnable")
	}
	if again, err := s.AdoptBatch(ctx, []Adoption{a}); err != nil || again[0].ID != 0 {
		t.Errorf("adopting the same file again: %+v, %v", again, err)
	}
	if fin, err := s.Unfinalized(); err != nil || len(fin) != 0 {
		t.Errorf("adopted jobs wait for after-actions: %v, %v", fin, err)
	}
	// A copy of the same content in another folder is a duplicate.
	mustEnqueue(t, s, cand("/other/copy.ply", 10, 200), true)
	c, ok, err := s.Claim(clk.Now())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	got := advance(t, s, c, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = "aaa" })
	if got.Stage != state.Done || got.DuplicateOf != j.ID {
		t.Errorf("a copy of adopted content: %s, duplicate of %d (want done, %d)", got.Stage, got.DuplicateOf, j.ID)
	}
}

// TestAdoptLeavesJobsInFlight: a path whose job is still being worked on is
// not adopted from under its worker.
func TestAdoptLeavesJobsInFlight(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), Options{})
	mustEnqueue(t, s, cand("/in/a.ply", 10, 100), true)
	jobs, err := s.AdoptBatch(context.Background(), []Adoption{{Path: "/in/a.ply", Size: 10, ModTime: time.Unix(200, 0), SHA256: "aaa"}})
	if err != nil || jobs[0].ID != 0 {
		t.Errorf("adopted over a queued job: %+v, %v", jobs, err)
	}
}

// TestRecordAfterError: the after-action stage is recorded on the job and
// cleared by MarkFinalized and by an operator's retry.
func TestRecordAfterError(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/in/a.ply", 10, 100), true)
	j, _, _ := s.Claim(clk.Now())
	if _, err := s.RecordAfterError(j.ID, "move", "x", clk.Now()); err == nil {
		t.Error("recorded an after-action error on a queued job")
	}
	j = advance(t, s, j, state.Failed, clk.Now(), func(j *state.Job) { j.FailReason = "bad" })
	retry := clk.Now().Add(time.Minute)
	got, err := s.RecordAfterError(j.ID, "move", "permission denied", retry)
	if err != nil || got.AfterAction != "move" || got.AfterError != "permission denied" || got.AfterAttempts != 1 || !got.AfterRetry.Equal(retry) {
		t.Fatalf("RecordAfterError = %+v, %v", got, err)
	}
	if got, _ = s.RecordAfterError(j.ID, "move", "permission denied", retry); got.AfterAttempts != 2 {
		t.Errorf("attempts = %d, want 2", got.AfterAttempts)
	}
	if err := s.MarkFinalized(j.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(j.ID); got.AfterError != "" || got.AfterAttempts != 0 || !got.Finalized {
		t.Errorf("after MarkFinalized: %+v", got)
	}
}

// TestAdoptKeepsRetention: adopting more receipts than the retention keeps
// prunes as it goes, over more jobs than one retention transaction takes,
// and leaves exactly MaxFinished jobs in full, the rest as tombstones.
func TestAdoptKeepsRetention(t *testing.T) {
	t.Parallel()
	clk := newClock()
	const keep, n = 100, 2*pruneBatch + 500
	s := open(t, t.TempDir(), Options{Now: clk.Now, Retention: Retention{MaxFinished: keep}})
	var as []Adoption
	for i := range n {
		done := time.Unix(int64(1000+i), 0)
		as = append(as, Adoption{Path: fmt.Sprintf("/in/%05d.ply", i), Size: 1, ModTime: time.Unix(1, 0),
			SHA256: fmt.Sprintf("%064x", i), SplatID: fmt.Sprint(i), CompletedAt: &done})
	}
	if _, err := s.AdoptBatch(context.Background(), as[:n/2]); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Stats()
	if st.Jobs != keep || st.Tombstones != n/2-keep {
		t.Fatalf("after the first batch: %d jobs, %d tombstones; want %d and %d", st.Jobs, st.Tombstones, keep, n/2-keep)
	}
	if _, err := s.AdoptBatch(context.Background(), as[n/2:]); err != nil {
		t.Fatal(err)
	}
	st, _ = s.Stats()
	if st.Jobs != keep || st.Tombstones != n-keep {
		t.Fatalf("after both: %d jobs, %d tombstones; want %d and %d", st.Jobs, st.Tombstones, keep, n-keep)
	}
	for _, i := range []int{0, n - keep - 1, n - keep, n - 1} {
		if !s.Known(as[i].Path, 1, time.Unix(1, 0)) {
			t.Errorf("%s not Known", as[i].Path)
		}
	}
	if _, err := s.Get(uint64(n)); err != nil {
		t.Errorf("the newest adoption was pruned: %v", err)
	}
	if _, err := s.Get(uint64(n - keep)); !errors.Is(err, ErrNotFound) {
		t.Errorf("job %d (older than the newest %d) is kept: %v", n-keep, keep, err)
	}
}

// TestAdoptBatchChunks: more adoptions than one transaction takes are
// committed AdoptChunk at a time; an error in a later chunk leaves the
// earlier chunks recorded and returned.
func TestAdoptBatchChunks(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), Options{})
	txid := func() (id int) {
		_ = s.db.DB.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
		return id
	}
	var as []Adoption
	for i := range 2*AdoptChunk + 3 {
		as = append(as, Adoption{Path: fmt.Sprintf("/in/%03d.ply", i), Size: 1, ModTime: time.Unix(1, 0), SHA256: fmt.Sprintf("%064x", i)})
	}
	before := txid()
	jobs, err := s.AdoptBatch(context.Background(), as)
	if err != nil || len(jobs) != len(as) {
		t.Fatalf("AdoptBatch: %d jobs, %v; want %d", len(jobs), err, len(as))
	}
	if commits := txid() - before; commits < 3 {
		t.Errorf("%d commits for %d adoptions, want one per %d at least", commits, len(as), AdoptChunk)
	}

	var more []Adoption
	for i := range 2*AdoptChunk + 3 {
		more = append(more, Adoption{Path: fmt.Sprintf("/in/more-%03d.ply", i), Size: 1, ModTime: time.Unix(1, 0), SHA256: fmt.Sprintf("%064x", 1000+i)})
	}
	more[2*AdoptChunk+1].SHA256 = "" // the third chunk fails
	jobs, err = s.AdoptBatch(context.Background(), more)
	if err == nil || len(jobs) != 2*AdoptChunk {
		t.Fatalf("AdoptBatch with a bad third chunk: %d jobs, %v; want the first two chunks' %d and an error", len(jobs), err, 2*AdoptChunk)
	}
	for i, a := range more {
		if known := s.Known(a.Path, 1, time.Unix(1, 0)); known != (i < 2*AdoptChunk) {
			t.Errorf("%s known %v after the failed batch", a.Path, known)
		}
	}
}
