package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *clock { return &clock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)} }

func open(t *testing.T, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func cand(path string, size int64, sec int64) Candidate {
	return Candidate{Path: path, Root: filepath.Dir(path), Size: size, ModTime: time.Unix(sec, 0)}
}

func mustEnqueue(t *testing.T, s *Store, c Candidate, want bool) {
	t.Helper()
	created, err := s.EnqueueBatch(context.Background(), []Candidate{c})
	if err != nil {
		t.Fatal(err)
	}
	if got := created[0]; got != want {
		t.Fatalf("Enqueue(%s) created=%v, want %v", c.Path, got, want)
	}
}

// advance moves a claimed job to stage `to` through Commit.
func advance(t *testing.T, s *Store, j state.Job, to state.Stage, now time.Time, edit func(*state.Job)) state.Job {
	t.Helper()
	from := j.Stage
	if err := j.Move(to, now); err != nil {
		t.Fatal(err)
	}
	j.NextAttempt = now
	if edit != nil {
		edit(&j)
	}
	out, err := s.Commit(j, from)
	if err != nil {
		t.Fatalf("commit %s→%s: %v", from, to, err)
	}
	return out
}

func claim(t *testing.T, s *Store, now time.Time) state.Job {
	t.Helper()
	j, ok, err := s.Claim(now)
	if err != nil || !ok {
		t.Fatalf("Claim: ok=%v err=%v", ok, err)
	}
	return j
}

func TestEnqueueIdempotentAndKnown(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 10, 100), true)
	mustEnqueue(t, s, cand("/w/a.ply", 10, 100), false)
	// Changed before publish: the running job notices; no second job.
	mustEnqueue(t, s, cand("/w/a.ply", 11, 101), false)
	mustEnqueue(t, s, cand("/w/b.ply", 10, 100), true)
	if !s.Known("/w/a.ply", 10, time.Unix(100, 0)) || s.Known("/w/a.ply", 11, time.Unix(101, 0)) || s.Known("/w/c.ply", 1, time.Unix(1, 0)) {
		t.Error("Known")
	}
	if got := s.KnownBatch([]Candidate{cand("/w/a.ply", 10, 100), cand("/w/a.ply", 11, 101), cand("/w/c.ply", 1, 1), cand("/w/b.ply", 10, 100)}); fmt.Sprint(got) != "[true false false true]" {
		t.Errorf("KnownBatch = %v, want Known of each", got)
	}
	created, err := s.EnqueueBatch(context.Background(), []Candidate{cand("/w/b.ply", 10, 100), cand("/w/c.ply", 1, 1), cand("/w/d.ply", 1, 1)})
	if err != nil || fmt.Sprint(created) != "[false true true]" {
		t.Fatalf("EnqueueBatch = %v, %v", created, err)
	}
	jobs, err := s.List(Filter{})
	if err != nil || len(jobs) != 4 {
		t.Fatalf("List = %d jobs, %v", len(jobs), err)
	}
	for i, j := range jobs {
		if j.ID != uint64(i+1) || j.Stage != state.Queued || j.V != 1 {
			t.Errorf("job %d: %+v", i, j)
		}
	}
	if _, err := s.Get(99); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(99) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.EnqueueBatch(ctx, []Candidate{cand("/w/e.ply", 1, 1)}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled EnqueueBatch = %v", err)
	}
}

func TestClaimOrderAndExclusive(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	for i := range 3 {
		mustEnqueue(t, s, cand(fmt.Sprintf("/w/%d.ply", i), 1, 1), true)
	}
	now := clk.Now()
	j1 := claim(t, s, now)
	// Job 1 retries in a minute: job 2 and 3 come first.
	j1.Attempts++
	j1.NextAttempt = now.Add(time.Minute)
	if _, err := s.Commit(j1, state.Queued); err != nil {
		t.Fatal(err)
	}
	s.Release(j1.ID)
	j2 := claim(t, s, now)
	j3 := claim(t, s, now)
	if j2.ID != 2 || j3.ID != 3 {
		t.Fatalf("claimed %d, %d; want 2, 3", j2.ID, j3.ID)
	}
	if _, ok, _ := s.Claim(now); ok {
		t.Fatal("claimed a job that is not due")
	}
	if at, ok := s.NextDue(); !ok || !at.Equal(now.Add(time.Minute)) {
		t.Errorf("NextDue = %v, %v", at, ok)
	}
	if j, ok, _ := s.Claim(now.Add(time.Minute)); !ok || j.ID != 1 {
		t.Errorf("claim after due: %v %v", j.ID, ok)
	}
}

func TestClaimConcurrent(t *testing.T) {
	t.Parallel()
	s := open(t, t.TempDir(), Options{NoSync: true})
	const n = 200
	cs := make([]Candidate, n)
	for i := range cs {
		cs[i] = cand(fmt.Sprintf("/w/%d.ply", i), 1, 1)
	}
	if _, err := s.EnqueueBatch(context.Background(), cs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[uint64]int{}
	var wg sync.WaitGroup
	far := time.Now().Add(time.Hour)
	for range 8 {
		wg.Go(func() {
			for {
				j, ok, err := s.Claim(far)
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					return
				}
				mu.Lock()
				seen[j.ID]++
				mu.Unlock()
				// Commit a retry far in the future and release: nobody may
				// claim it again in this test.
				j.NextAttempt = far.Add(time.Hour)
				if _, err := s.Commit(j, state.Queued); err != nil {
					t.Error(err)
				}
				s.Release(j.ID)
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Errorf("claimed %d distinct jobs, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("job %d claimed %d times", id, c)
		}
	}
}

func TestCommitChecks(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
	j := claim(t, s, clk.Now())
	// Illegal transition.
	bad := j
	bad.Stage = state.Uploaded
	var te *state.TransitionError
	if _, err := s.Commit(bad, state.Queued); !errors.As(err, &te) {
		t.Errorf("illegal commit: %v", err)
	}
	// Stale expected stage.
	if _, err := s.Commit(j, state.Ready); !errors.Is(err, ErrConflict) {
		t.Errorf("stale commit: %v", err)
	}
	// Nothing changed by the refused commits.
	if got, _ := s.Get(j.ID); got.Stage != state.Queued {
		t.Errorf("stage after refused commits: %s", got.Stage)
	}
}

// TestEveryTransition walks a job through the whole pipeline and checks the
// indexes at each stage.
func TestEveryTransition(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
	now := clk.Now()
	j := claim(t, s, now)
	j = advance(t, s, j, state.Queued, now, func(j *state.Job) { j.Size = 2; j.ModTime = time.Unix(2, 0) }) // changed since seen
	if !s.Known("/w/a.ply", 2, time.Unix(2, 0)) {
		t.Error("path index not updated to the re-stat size/mtime")
	}
	j = advance(t, s, j, state.Ready, now, func(j *state.Job) { j.SHA256 = "aa" })
	j = advance(t, s, j, state.Signed, now, func(j *state.Job) { j.Upload = state.Upload{URL: "u", Key: "k"} })
	j = advance(t, s, j, state.Ready, now, nil) // URL expired
	j = advance(t, s, j, state.Signed, now, nil)
	j = advance(t, s, j, state.Uploaded, now, nil)
	j = advance(t, s, j, state.Publishing, now, nil)
	j = advance(t, s, j, state.Publishing, now, nil) // 5xx, publish again
	j = advance(t, s, j, state.Processing, now, func(j *state.Job) { j.SplatID = "1" })
	j = advance(t, s, j, state.Processing, now, nil)
	j = advance(t, s, j, state.Done, now, nil)
	s.Release(j.ID)
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Stages[state.Done] != 1 || st.Jobs != 1 || !st.OldestUnfinished.IsZero() {
		t.Errorf("stats: %+v", st)
	}
	if _, ok := s.NextDue(); ok {
		t.Error("a done job is still due")
	}
	// Retry of a done job is a deliberate republish: a new generation.
	r, err := s.Retry(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stage != state.Queued || r.Generation != 1 || r.SplatID != "" || r.SHA256 != "" {
		t.Errorf("retried done job: %+v", r)
	}
}

func TestDedupe(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now, DedupeWait: time.Minute})
	mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
	mustEnqueue(t, s, cand("/x/copy.ply", 1, 1), true)
	now := clk.Now()
	a := claim(t, s, now)
	b := claim(t, s, now)
	a = advance(t, s, a, state.Ready, now, func(j *state.Job) { j.SHA256 = "same" })
	// b hashes to the same content while a is in flight: b waits.
	b = advance(t, s, b, state.Ready, now, func(j *state.Job) { j.SHA256 = "same" })
	if b.Stage != state.Queued || !b.NextAttempt.Equal(now.Add(time.Minute)) || !strings.Contains(b.LastError, "job 1") {
		t.Fatalf("b while a in flight: %+v", b)
	}
	s.Release(b.ID)
	for _, to := range []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
		a = advance(t, s, a, to, now, func(j *state.Job) { j.SplatID, j.ViewerURL = "42", "https://v/view?id=h" })
	}
	clk.Add(time.Minute)
	b = claim(t, s, clk.Now())
	b = advance(t, s, b, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = "same" })
	if b.Stage != state.Done || b.DuplicateOf != a.ID || b.SplatID != "42" || b.Upload.URL != "" {
		t.Fatalf("b after a done: %+v", b)
	}
}

func TestFailedOwnerDoesNotBlock(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
	mustEnqueue(t, s, cand("/w/b.ply", 1, 1), true)
	now := clk.Now()
	a := claim(t, s, now)
	a = advance(t, s, a, state.Ready, now, func(j *state.Job) { j.SHA256 = "c" })
	a = advance(t, s, a, state.Failed, now, func(j *state.Job) { j.FailReason = "sign: HTTP 400" })
	b := claim(t, s, now)
	b = advance(t, s, b, state.Ready, now, func(j *state.Job) { j.SHA256 = "c" })
	if b.Stage != state.Ready {
		t.Fatalf("b blocked by a failed owner: %+v", b)
	}
	// Retry of the failed one now waits for b.
	s.Release(a.ID)
	a, err := s.Retry(a.ID)
	if err != nil || a.Stage != state.Queued || a.SHA256 != "" || a.FailReason != "" {
		t.Fatalf("retry: %+v %v", a, err)
	}
}

func TestRetryAndRecovery(t *testing.T) {
	t.Parallel()
	clk := newClock()
	dir := t.TempDir()
	s, err := Open(dir, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		mustEnqueue(t, s, cand(fmt.Sprintf("/w/%d.ply", i), 1, 1), true)
	}
	now := clk.Now()
	// Job 1 stops in publishing (crash), job 2 fails, job 3 is claimed.
	j1 := claim(t, s, now)
	for i, to := range []state.Stage{state.Ready, state.Signed, state.Uploaded, state.Publishing} {
		j1 = advance(t, s, j1, to, now, func(j *state.Job) { j.SHA256 = fmt.Sprint("h", i*0) })
	}
	j2 := claim(t, s, now)
	j2 = advance(t, s, j2, state.Failed, now, nil)
	claim(t, s, now)
	s.Close()

	s = open(t, dir, Options{Now: clk.Now})
	got, _ := s.Get(j1.ID)
	if got.Stage != state.Publishing || !got.Uncertain {
		t.Errorf("recovered publishing job: %+v", got)
	}
	// Claims do not survive: both in-flight jobs are runnable.
	var ids []uint64
	for {
		j, ok, err := s.Claim(now)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		ids = append(ids, j.ID)
	}
	if fmt.Sprint(ids) != "[1 3]" {
		t.Errorf("runnable after reopen: %v", ids)
	}
	n, err := s.RetryFailed()
	if err != nil || n != 1 {
		t.Fatalf("RetryFailed = %d, %v", n, err)
	}
	// Held → uploaded without the uncertain mark: the worker commits a
	// fresh publish intent.
	j1, _ = s.Get(j1.ID)
	j1 = advance(t, s, j1, state.Held, now, nil)
	j1, err = s.Retry(j1.ID)
	if err != nil || j1.Stage != state.Uploaded || j1.Uncertain {
		t.Errorf("retry held: %+v %v", j1, err)
	}
	if _, err := s.Retry(3); err == nil {
		t.Error("retry of a queued job succeeded")
	}
	list, _ := s.List(Filter{Stages: []state.Stage{state.Queued, state.Uploaded}})
	if len(list) != 3 || list[0].ID != 1 || list[2].ID != 3 {
		t.Errorf("List by stage: %d jobs", len(list))
	}
}

func TestRetention(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now, Retention: Retention{MaxFinished: 3, MaxAge: 24 * time.Hour}, PruneEvery: 1})
	for i := range 6 {
		mustEnqueue(t, s, cand(fmt.Sprintf("/w/%d.ply", i), 1, 1), true)
		j := claim(t, s, clk.Now())
		j = advance(t, s, j, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = fmt.Sprint("h", i) })
		if i == 5 {
			j = advance(t, s, j, state.Failed, clk.Now(), nil)
		} else {
			for _, to := range []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
				j = advance(t, s, j, to, clk.Now(), func(j *state.Job) { j.SplatID = fmt.Sprint(100 + i) })
			}
		}
		s.Release(j.ID)
		clk.Add(time.Minute)
	}
	st, _ := s.Stats()
	if st.Jobs != 3 || st.Tombstones != 3 {
		t.Fatalf("after count retention: %+v", st)
	}
	if _, err := s.Get(1); !errors.Is(err, ErrNotFound) {
		t.Errorf("job 1 not pruned: %v", err)
	}
	// The pruned file is still known, and its content still deduplicated.
	if !s.Known("/w/0.ply", 1, time.Unix(1, 0)) {
		t.Error("pruned path no longer Known")
	}
	mustEnqueue(t, s, cand("/y/copy-of-0.ply", 1, 1), true)
	j := claim(t, s, clk.Now())
	j = advance(t, s, j, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = "h0" })
	if j.Stage != state.Done || j.DuplicateOf != 1 || j.SplatID != "100" {
		t.Errorf("copy of pruned content: %+v", j)
	}
	// Age: everything older than a day goes.
	clk.Add(48 * time.Hour)
	if n, err := s.Prune(); err != nil || n != 3 {
		t.Errorf("age prune = %d, %v", n, err)
	}

	// TrimPaths forgets the paths of pruned jobs whose files are gone, and
	// only those: /w/1.ply "still exists", the copy's job is pruned too.
	gone := func(p string) bool { return p != "/w/1.ply" }
	n, err := s.TrimPaths(context.Background(), gone)
	if err != nil || n != 6 { // every job is pruned by now: 7 paths, all gone but /w/1.ply
		t.Errorf("TrimPaths = %d, %v", n, err)
	}
	if !s.Known("/w/1.ply", 1, time.Unix(1, 0)) {
		t.Error("a pruned job's path whose file exists was forgotten")
	}
	if s.Known("/w/0.ply", 1, time.Unix(1, 0)) {
		t.Error("a pruned job's path whose file is gone is still known")
	}
	// Content dedupe does not depend on paths.
	mustEnqueue(t, s, cand("/z/another-copy-of-0.ply", 1, 1), true)
	j = claim(t, s, clk.Now())
	j = advance(t, s, j, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = "h0" })
	if j.Stage != state.Done || j.DuplicateOf != 1 {
		t.Errorf("copy of pruned content after TrimPaths: %+v", j)
	}
}

func TestLockedAndSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	_, err := Open(dir, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrLocked) || err.Error() != "another splatd is using "+dir {
		t.Fatalf("second open: %v", err)
	}
	s.Close()

	// A newer schema is refused with a clear message.
	db, err := bolt.Open(filepath.Join(dir, FileName), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketMeta).Put(keySchema, u64(SchemaVersion+1)) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("newer schema: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, FileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode: %v %v", fi.Mode(), err)
	}
}

// TestRetryWaitingJob: a live job that a server's delay parked for later
// (a retry scheduled far ahead) is tried now by `splatd retry ID`, at its
// stage; a job due now (being worked on) is refused.
func TestRetryWaitingJob(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 10, 100), true)
	now := clk.Now()
	j := claim(t, s, now)
	j = advance(t, s, j, state.Ready, now, func(j *state.Job) { j.SHA256 = "h" })
	far := now.AddDate(10, 0, 0)
	j.NextAttempt, j.Attempts, j.LastError = far, 1, "sign: HTTP 503"
	j, err := s.Commit(j, state.Ready)
	if err != nil {
		t.Fatal(err)
	}
	s.Release(j.ID)
	if _, ok, _ := s.Claim(now); ok {
		t.Fatal("a job parked ten years ahead was claimable now")
	}
	r, err := s.Retry(j.ID)
	if err != nil || r.Stage != state.Ready || !r.NextAttempt.Equal(now) {
		t.Fatalf("retry of a waiting job: %v, next %s, stage %s", err, r.NextAttempt, r.Stage)
	}
	got := claim(t, s, now)
	if got.ID != j.ID {
		t.Fatalf("claimed job %d, want %d", got.ID, j.ID)
	}
	if _, err := s.Retry(j.ID); err == nil {
		t.Error("retry of a job due now (in flight) succeeded")
	}
}

// TestDecodePath: a path entry decodes as json.Unmarshal decodes it,
// whether or not it is in the form json.Marshal writes.
func TestDecodePath(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"v":1,"job":7,"size":10,"mtime":1700000000123456789}`, `{"v":1,"job":0,"size":-3,"mtime":-0}`,
		`{"v":1,"job":7,"size":10,"mtime":01}`, `{"v":1,"job":-7,"size":10,"mtime":1}`, `{"v":1,"job":7,"size":1e3,"mtime":1}`,
		`{"v":1, "job":7,"size":10,"mtime":1}`, `{"job":7,"v":1,"size":10,"mtime":1}`, `{"v":1,"job":7,"size":10,"mtime":1}x`,
		`{"v":1,"job":7,"size":99999999999999999999,"mtime":1}`, `{"v":1,"job":7,"size":10}`, `{"v":1,"job":7,"size":,"mtime":1}`, ``,
	} {
		var got, want pathEntry
		gotErr, wantErr := decodePath([]byte(raw), &got), json.Unmarshal([]byte(raw), &want)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("%s: decodePath = %+v, %v; json.Unmarshal = %+v, %v", raw, got, gotErr, want, wantErr)
		}
	}
}
