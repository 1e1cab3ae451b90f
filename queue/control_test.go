package queue

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
)

// publishAll walks a claimed job to done with content sha.
func publishAll(t *testing.T, s *Store, j state.Job, sha string) state.Job {
	t.Helper()
	now := s.o.Now()
	j = advance(t, s, j, state.Ready, now, func(j *state.Job) { j.SHA256 = sha })
	for _, to := range []state.Stage{state.Signed, state.Uploaded, state.Publishing, state.Processing, state.Done} {
		j = advance(t, s, j, to, now, func(j *state.Job) { j.SplatID = "s-" + sha })
	}
	s.Release(j.ID)
	return j
}

func TestCancel(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
	mustEnqueue(t, s, cand("/w/b.ply", 1, 1), true)
	now := clk.Now()
	a := claim(t, s, now)
	a = advance(t, s, a, state.Ready, now, func(j *state.Job) { j.SHA256 = "x" })
	a = advance(t, s, a, state.Signed, now, func(j *state.Job) { j.Upload.URL = "https://s/k?sig=secret" })

	// The worker holds a mid-upload; the operator cancels it.
	got, err := s.Cancel(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Stage != state.Canceled || got.Upload.URL != "" || got.TaskMessage == "" {
		t.Fatalf("canceled job = %+v", got)
	}
	// Its PUT finishes; the commit at the step boundary finds it canceled.
	if _, err := s.Commit(func() state.Job { j := a; _ = j.Move(state.Uploaded, now); return j }(), state.Signed); !errors.Is(err, ErrConflict) {
		t.Fatalf("worker's commit after cancel: %v, want ErrConflict", err)
	}
	s.Release(a.ID)
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Stages[state.Canceled] != 1 || st.Stages[state.Failed] != 0 {
		t.Fatalf("stats after cancel: %v", st.Stages)
	}
	// A canceled owner does not hold its content: b with the same content
	// goes on to ready instead of waiting.
	b := claim(t, s, now)
	b = advance(t, s, b, state.Ready, now, func(j *state.Job) { j.SHA256 = "x" })
	if b.Stage != state.Ready {
		t.Fatalf("b with the canceled job's content: %s (%s)", b.Stage, b.LastError)
	}
	for _, to := range []state.Stage{state.Signed, state.Uploaded, state.Publishing} {
		b = advance(t, s, b, to, now, nil)
	}
	if _, err := s.Cancel(b.ID); err == nil {
		t.Fatal("a job past its publish intent was canceled")
	}
	// Unfinalized lists the canceled job (its receipt is still to write);
	// retry re-queues it.
	un, err := s.Unfinalized()
	if err != nil || len(un) != 1 || un[0].ID != a.ID {
		t.Fatalf("Unfinalized = %v, %v", un, err)
	}
	if r, err := s.Retry(a.ID); err != nil || r.Stage != state.Queued {
		t.Fatalf("retry of canceled: %v, %v", r.Stage, err)
	}
}

func TestRepublish(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
	mustEnqueue(t, s, cand("/w/copy.ply", 1, 1), true)
	a := publishAll(t, s, claim(t, s, clk.Now()), "x")
	dup := claim(t, s, clk.Now())
	dup = advance(t, s, dup, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = "x" })
	if dup.DuplicateOf != a.ID {
		t.Fatalf("copy is not a duplicate: %+v", dup)
	}
	s.Release(dup.ID)

	if _, err := s.Republish(dup.ID); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("republish of a duplicate: %v, want ErrDuplicate", err)
	}
	r, err := s.Republish(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stage != state.Queued || r.Generation != 1 || r.SplatID != "" || r.SHA256 != "" {
		t.Fatalf("republished job = %+v", r)
	}
	// Hashed again to the same content, it is its own owner: not a
	// duplicate of its earlier publish.
	again := publishAll(t, s, claim(t, s, clk.Now()), "x")
	if again.DuplicateOf != 0 || again.Generation != 1 {
		t.Fatalf("after republish: %+v", again)
	}
	if r, err := s.Republish(a.ID); err != nil || r.Generation != 2 {
		t.Fatalf("second republish: generation %d, %v", r.Generation, err)
	}
	if _, err := s.Republish(a.ID); err == nil {
		t.Fatal("a queued job was republished")
	}
}

func TestForget(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := open(t, t.TempDir(), Options{Now: clk.Now})
	c := cand("/w/a.ply", 1, 1)
	mustEnqueue(t, s, c, true)
	a := claim(t, s, clk.Now())
	if _, err := s.Forget(a.ID); err == nil {
		t.Fatal("a job in flight was forgotten")
	}
	a = publishAll(t, s, a, "x")
	if j, err := s.JobByPath(c.Path); err != nil || j.ID != a.ID {
		t.Fatalf("JobByPath = %d, %v", j.ID, err)
	}
	if _, err := s.Forget(a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(a.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Forget: %v", err)
	}
	if s.Known(c.Path, c.Size, c.ModTime) {
		t.Fatal("the file is still Known after Forget")
	}
	if _, err := s.JobByPath(c.Path); !errors.Is(err, ErrNotFound) {
		t.Fatalf("JobByPath after Forget: %v", err)
	}
	// Found again, it is a new job, and its content is not a duplicate.
	mustEnqueue(t, s, c, true)
	b := publishAll(t, s, claim(t, s, clk.Now()), "x")
	if b.ID == a.ID || b.DuplicateOf != 0 {
		t.Fatalf("after Forget: %+v", b)
	}
	// Its generation is a new one: a protocol's idempotency key differs
	// from the forgotten publish's, so the content is published again.
	if b.Generation != 1 {
		t.Fatalf("after Forget: generation %d, want 1", b.Generation)
	}
	if _, err := s.Forget(b.ID); err != nil {
		t.Fatal(err)
	}
	mustEnqueue(t, s, c, true)
	if c3 := publishAll(t, s, claim(t, s, clk.Now()), "x"); c3.Generation != 2 {
		t.Fatalf("after a second Forget: generation %d, want 2", c3.Generation)
	}
	checkCounts(t, s)
}

// TestRetryAndRepublishOfADoneJobAgree: `splatd retry` and `splatd
// republish` of a done v1 job are one reset: the same record, a new
// generation without the last generation's session or after-action state.
// Republish once kept Protocol, V1 and the after-action fields that Retry
// cleared.
func TestRetryAndRepublishOfADoneJobAgree(t *testing.T) {
	t.Parallel()
	var got [2]state.Job
	for i, move := range []func(*Store, uint64) (state.Job, error){(*Store).Retry, (*Store).Republish} {
		clk := newClock()
		s := open(t, t.TempDir(), Options{Now: clk.Now})
		mustEnqueue(t, s, cand("/w/a.ply", 1, 1), true)
		j := claim(t, s, clk.Now())
		j = advance(t, s, j, state.Ready, clk.Now(), func(j *state.Job) { j.SHA256 = "x" })
		j = advance(t, s, j, state.Signed, clk.Now(), func(j *state.Job) {
			j.Protocol, j.V1 = state.ProtocolV1, &state.Session{Attempt: 1, Key: "k-g0", ID: "up"}
		})
		for _, to := range []state.Stage{state.Uploaded, state.Publishing, state.Processing, state.Done} {
			j = advance(t, s, j, to, clk.Now(), func(j *state.Job) { j.SplatID = "s" })
		}
		s.Release(j.ID)
		if _, err := s.RecordAfterError(j.ID, "move", "disk full", clk.Now().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Hour)
		r, err := move(s, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Generation != 1 || r.Protocol != "" || r.V1 != nil || r.AfterError != "" || r.SplatID != "" {
			t.Errorf("move %d: %+v", i, r)
		}
		if got[i], err = s.Get(j.ID); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("retry and republish of a done job differ:\n%+v\n%+v", got[0], got[1])
	}
}
