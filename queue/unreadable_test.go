package queue

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/state"
)

// deepSettings nests n lists: the settings a sidecar 9998 levels deep made
// before sidecars were bounded. Stored in a job, they put the record past
// the JSON decoder's 10000 levels.
func deepSettings(n int) map[string]any {
	var v any = []any{}
	for range n - 1 {
		v = []any{v}
	}
	return map[string]any{"a": v}
}

// overwrite replaces job id's stored record with raw bytes.
func overwrite(t *testing.T, s *Store, id uint64, raw string) {
	t.Helper()
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketJobs).Put(u64(id), []byte(raw))
	}); err != nil {
		t.Fatal(err)
	}
}

// TestUnreadableJobSkipped: job records that cannot be decoded (one with
// settings nested 9998 levels deep, as a sidecar once made, and damaged
// ones) do not stop the queue. The other jobs are claimed, listed and
// counted, a restart opens the store, and `splatd forget ID` removes each.
// On main one such record failed every Claim, List and Stats, and Forget
// of it too.
func TestUnreadableJobSkipped(t *testing.T) {
	t.Parallel()
	clk := newClock()
	dir := t.TempDir()
	s, err := Open(dir, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/w/deep.ply", "/w/failed.ply", "/w/publishing.ply", "/w/ok.ply"} {
		mustEnqueue(t, s, cand(p, 1, 1), true)
	}
	now := clk.Now()
	deep := claim(t, s, now)
	deep = advance(t, s, deep, state.Ready, now, func(j *state.Job) {
		j.SHA256, j.Params.Settings = "d", deepSettings(9998+3)
	})
	failed := advance(t, s, claim(t, s, now), state.Failed, now, nil)
	pub := claim(t, s, now)
	for _, to := range []state.Stage{state.Ready, state.Signed, state.Uploaded, state.Publishing} {
		pub = advance(t, s, pub, to, now, func(j *state.Job) { j.SHA256 = "p" })
	}
	for _, id := range []uint64{deep.ID, failed.ID, pub.ID} {
		s.Release(id)
	}
	overwrite(t, s, failed.ID, `{"v":1,"id":`)
	overwrite(t, s, pub.ID, `{"v":99}`)
	if _, err := s.Get(deep.ID); !errors.Is(err, ErrUnreadable) || !strings.Contains(err.Error(), "splatd forget "+strconv.FormatUint(deep.ID, 10)) {
		t.Fatalf("Get of the deep record = %v; want ErrUnreadable saying to forget it", err)
	}

	// A worker still holding the deep job drops it: its commit conflicts.
	next := deep
	if err := next.Move(state.Signed, now); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(next, state.Ready); !errors.Is(err, ErrConflict) {
		t.Errorf("commit over an unreadable record = %v; want ErrConflict", err)
	}

	// A restart opens the store (its recovery reads publishing jobs), and
	// a retention pass over the failed record keeps it.
	s.Close()
	clk.Add(48 * time.Hour)
	s = open(t, dir, Options{Now: clk.Now, Retention: Retention{MaxAge: time.Hour}})

	ok, got, err := s.Claim(clk.Now())
	if err != nil || !got || ok.Path != "/w/ok.ply" {
		t.Fatalf("Claim = %s, %v, %v; want ok.ply", ok.Path, got, err)
	}
	if j, got, err := s.Claim(clk.Now()); err != nil || got {
		t.Errorf("second Claim = job %d, %v, %v; want nothing and no error", j.ID, got, err)
	}
	if at, due := s.NextDue(); due {
		t.Errorf("NextDue = %v: an unreadable job would wake the workers forever", at)
	}

	jobs, err := s.List(Filter{})
	if err != nil || len(jobs) != 4 {
		t.Fatalf("List = %d jobs, %v; want 4", len(jobs), err)
	}
	want := map[uint64]state.Stage{deep.ID: state.Ready, failed.ID: state.Failed, pub.ID: state.Publishing}
	for _, j := range jobs {
		if stg, bad := want[j.ID]; bad && (j.Stage != stg || !strings.Contains(j.LastError, "cannot be read")) {
			t.Errorf("listed unreadable job %d: stage %q, error %q; want %s and the reason", j.ID, j.Stage, j.LastError, stg)
		}
	}
	if jobs, err := s.List(Filter{Stages: []state.Stage{state.Failed}}); err != nil || len(jobs) != 1 || jobs[0].ID != failed.ID {
		t.Errorf("List(failed) = %+v, %v", jobs, err)
	}
	st, err := s.Stats()
	if err != nil || st.Jobs != 4 || st.Stages[state.Ready] != 1 || !st.OldestUnfinished.Equal(ok.CreatedAt) {
		t.Errorf("Stats = %+v, %v; want 4 jobs, the unreadable counted in their stages", st, err)
	}
	if _, err := s.Unfinalized(); err != nil {
		t.Errorf("Unfinalized: %v", err)
	}
	if _, err := s.RetryFailed(); err != nil {
		t.Errorf("RetryFailed: %v", err)
	}
	// The publishing file, changed, is a new job.
	mustEnqueue(t, s, cand("/w/publishing.ply", 2, 2), true)

	for _, tc := range []struct {
		id   uint64
		path string
	}{{deep.ID, "/w/deep.ply"}, {failed.ID, "/w/failed.ply"}, {pub.ID, ""}} {
		j, err := s.Forget(tc.id)
		if err != nil || j.ID != tc.id || j.Path != tc.path {
			t.Errorf("Forget(%d) = %d %q, %v; want its path %q", tc.id, j.ID, j.Path, err, tc.path)
		}
		if _, err := s.Get(tc.id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%d) after Forget: %v", tc.id, err)
		}
	}
	checkCounts(t, s)
	if s.Known("/w/deep.ply", 1, time.Unix(1, 0)) || !s.Known("/w/publishing.ply", 2, time.Unix(2, 0)) {
		t.Error("Forget of an unreadable record: the path index still names it, or lost the newer job")
	}
	// Found again, the file is a new job; the forgotten job's content
	// ("d") is not taken for published.
	mustEnqueue(t, s, cand("/w/deep.ply", 1, 1), true)
	for {
		j := claim(t, s, clk.Now())
		if j.Path != "/w/deep.ply" {
			continue // the changed publishing.ply, left claimed
		}
		if j = publishAll(t, s, j, "d"); j.DuplicateOf != 0 {
			t.Errorf("after Forget: %+v", j)
		}
		break
	}
	checkCounts(t, s)
}

// TestUnreadableJobDoesNotStopClaims: with the first due job's record
// unreadable, Claim hands out the next ones, List and Stats answer, and
// Forget removes it. On main each of these failed with the decode error.
func TestUnreadableJobDoesNotStopClaims(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	for _, p := range []string{"/w/bad.ply", "/w/a.ply", "/w/b.ply"} {
		mustEnqueue(t, s, cand(p, 1, 1), true)
	}
	overwrite(t, s, 1, `{"v":1,"id":1,"params":{"settings":{"a":`+strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+`}}}`)
	for _, want := range []string{"/w/a.ply", "/w/b.ply"} {
		j, ok, err := s.Claim(clk.Now())
		if err != nil || !ok || j.Path != want {
			t.Fatalf("Claim = %q, %v, %v; want %s", j.Path, ok, err, want)
		}
	}
	if jobs, err := s.List(Filter{}); err != nil || len(jobs) != 3 {
		t.Errorf("List = %d jobs, %v; want 3", len(jobs), err)
	}
	if st, err := s.Stats(); err != nil || st.Stages[state.Queued] != 3 {
		t.Errorf("Stats = %+v, %v", st, err)
	}
	if _, err := s.Forget(1); err != nil {
		t.Errorf("Forget = %v", err)
	}
	checkCounts(t, s)
}
