package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader"
	"github.com/splatd/splatd/uploader/pace"
)

// jobList is a JobSource of fixed jobs.
type jobList []state.Job

func (l jobList) List(queue.Filter) ([]state.Job, error)  { return l, nil }
func (jobList) Retry(uint64) (state.Job, error)           { return state.Job{}, nil }
func (jobList) RetryFailed() (int, error)                 { return 0, nil }
func (jobList) Resolve(uint64, string) (state.Job, error) { return state.Job{}, nil }

// TestListViewsParkedOnTheRateLimit: a job parked on the rate limit (its
// request held back until the window's end, its worker given back) says
// so like a job the pacer holds in its worker: rate_limit with the class,
// the reason and the time, and rate_limit_until; not "waiting for a free
// worker", which stays for a due job while every worker is busy. A park
// whose time has passed (the job is due again) shows nothing of it.
func TestListViewsParkedOnTheRateLimit(t *testing.T) {
	now := time.Now()
	until := now.Add(40 * time.Second).Truncate(time.Second)
	parked := state.Job{ID: 1, File: state.File{Path: "/in/a.ply"}, Stage: state.Uploaded, NextAttempt: until,
		Wait: state.Wait{RateLimited: &state.RateWait{Class: "strict", Reason: "no request left in the window", Until: until}}}
	stale := state.Job{ID: 2, File: state.File{Path: "/in/b.ply"}, Stage: state.Uploaded, NextAttempt: now.Add(-time.Second),
		Wait: state.Wait{RateLimited: &state.RateWait{Class: "strict", Reason: "no request left in the window", Until: now.Add(-time.Second)}}}
	running := state.Job{ID: 3, File: state.File{Path: "/in/c.ply"}, Stage: state.Signed, NextAttempt: now.Add(-time.Minute)}
	live := Live{Running: map[uint64]bool{3: true}, Workers: 1, Delays: map[uint64]pace.Delay{}}

	views, err := ListViews(jobList{parked, stale, running}, "", live)
	if err != nil {
		t.Fatal(err)
	}
	want := "strict: no request left in the window, until " + until.UTC().Format(time.TimeOnly) + " UTC"
	if v := views[0]; v.RateLimit != want || v.RateLimitUntil == nil || !v.RateLimitUntil.Equal(until) || v.WaitingFor != "" {
		t.Errorf("parked job: rate_limit %q until %v, waiting_for %q; want %q until %v and no waiting_for",
			v.RateLimit, v.RateLimitUntil, v.WaitingFor, want, until)
	}
	b, _ := json.Marshal(views[0])
	if !strings.Contains(string(b), `"rate_limit":"`+want+`"`) || !strings.Contains(string(b), `"rate_limit_until":`) {
		t.Errorf("-json of the parked job lacks rate_limit or rate_limit_until: %s", b)
	}
	if v := views[1]; v.RateLimit != "" || v.WaitingFor != "a free worker (1 of 1 busy)" {
		t.Errorf("due job after its park: rate_limit %q, waiting_for %q; want none and a free worker (1 of 1 busy)", v.RateLimit, v.WaitingFor)
	}
}

// TestParkedOnCountsParkedJobs: the status page's parked count of a class
// is its jobs parked on the rate limit until a time after now; a park whose
// time has passed, a job claimed again (no park) or a final job counts none.
func TestParkedOnCountsParkedJobs(t *testing.T) {
	now := time.Now()
	wait := func(class string, until time.Time) *state.RateWait {
		return &state.RateWait{Class: class, Reason: "no request left in the window", Until: until}
	}
	jobs := []state.Job{
		{ID: 1, Stage: state.Uploaded, NextAttempt: now.Add(time.Minute), Wait: state.Wait{RateLimited: wait("strict", now.Add(time.Minute))}},
		{ID: 2, Stage: state.Signed, NextAttempt: now.Add(time.Second), Wait: state.Wait{RateLimited: wait("strict", now.Add(time.Second))}},
		{ID: 3, Stage: state.Signed, NextAttempt: now.Add(time.Second), Wait: state.Wait{RateLimited: wait("normal", now.Add(time.Second))}},
		{ID: 4, Stage: state.Uploaded, NextAttempt: now.Add(-time.Second), Wait: state.Wait{RateLimited: wait("strict", now.Add(-time.Second))}},
		{ID: 5, Stage: state.Signed, NextAttempt: now.Add(time.Minute)},
		{ID: 6, Stage: state.Done, NextAttempt: now.Add(time.Minute), Wait: state.Wait{RateLimited: wait("strict", now.Add(time.Minute))}},
	}
	if got := parkedOn(jobs, now); len(got) != 2 || got["strict"] != 2 || got["normal"] != 1 {
		t.Errorf("parked now = %v, want strict 2, normal 1", got)
	}
	if got := parkedOn(jobs, now.Add(2*time.Second)); len(got) != 1 || got["strict"] != 1 {
		t.Errorf("parked 2 s later = %v, want strict 1 (the other parks are over)", got)
	}
}

// TestListViewsCheckProgress: a queued job whose file a worker is hashing
// shows it (checking, checked, check_size, the rate and ETA, in -json as
// the upload's sent, rate_bytes_per_second and eta_s), its stage still
// queued; once the check is over (no entry in the pool's view) or for a
// job that no worker checks, none of it.
func TestListViewsCheckProgress(t *testing.T) {
	hashing := state.Job{ID: 1, File: state.File{Path: "/in/huge.ply", Size: 5 << 30}, Stage: state.Queued}
	other := state.Job{ID: 2, File: state.File{Path: "/in/b.ply", Size: 100}, Stage: state.Queued}
	live := Live{Running: map[uint64]bool{1: true}, Workers: 2, Checks: map[uint64]uploader.Progress{
		1: {Path: hashing.Path, Step: uploader.CheckHashing, Sent: 2150 << 20, Size: 5 << 30, Rate: 180 << 20, ETA: 16400 * time.Millisecond},
	}}
	views, err := ListViews(jobList{hashing, other}, "", live)
	if err != nil {
		t.Fatal(err)
	}
	v := views[0]
	if v.Stage != "queued" || v.Checking != "hashing" || v.Checked != 2150<<20 || v.CheckSize != 5<<30 || v.CheckRate != 180<<20 || v.CheckETA != 16 {
		t.Errorf("hashing job's view: %+v", v)
	}
	b, _ := json.Marshal(v)
	for _, f := range []string{`"checking":"hashing"`, `"checked":2254438400`, `"check_size":5368709120`, `"check_rate_bytes_per_second":188743680`, `"check_eta_s":16`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("-json of the hashing job lacks %s: %s", f, b)
		}
	}
	if v := views[1]; v.Checking != "" || v.Checked != 0 || v.CheckSize != 0 {
		t.Errorf("job no worker checks: %+v", v)
	}
	views, err = ListViews(jobList{hashing}, "", Live{Running: map[uint64]bool{1: true}, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if v := views[0]; v.Checking != "" || v.CheckSize != 0 {
		t.Errorf("after the check: %+v", v)
	}
}

// TestWithCheckedInProgress: the status page's "in progress" list (stages
// from ready on) also lists the queued jobs a worker is checking (hashing)
// now, with their check's progress; a list that asks for queued jobs has
// them already, and a queued job no worker checks is not added.
func TestWithCheckedInProgress(t *testing.T) {
	hashing := state.Job{ID: 1, File: state.File{Path: "/in/huge.ply"}, Stage: state.Queued}
	ready := state.Job{ID: 2, File: state.File{Path: "/in/b.ply"}, Stage: state.Ready}
	gone := state.Job{ID: 3, File: state.File{Path: "/in/c.ply"}, Stage: state.Ready} // checked since the pool was asked
	store := map[uint64]state.Job{1: hashing, 2: ready, 3: gone}
	get := func(id uint64) (state.Job, error) { return store[id], nil }
	live := Live{Checks: map[uint64]uploader.Progress{1: {Step: uploader.CheckHashing, Sent: 1, Size: 2}, 3: {Step: uploader.CheckHashing, Sent: 1, Size: 2}}}
	active := []state.Stage{state.Ready, state.Signed}
	got := withChecked([]state.Job{ready, gone}, active, live, get)
	if len(got) != 3 || got[2].ID != 1 {
		t.Errorf("in progress: %v, want jobs 2, 3 and the hashing job 1", got)
	}
	if got := withChecked([]state.Job{hashing}, []state.Stage{state.Queued, state.Ready}, live, get); len(got) != 1 {
		t.Errorf("a list of queued jobs got the hashing job twice: %v", got)
	}
	if got := withChecked([]state.Job{ready}, active, Live{}, get); len(got) != 1 {
		t.Errorf("no check running: %v", got)
	}
	if got := withChecked(nil, []state.Stage{state.Done}, live, get); len(got) != 0 {
		t.Errorf("published list: %v", got)
	}
}

// TestListViewsPaused: while the pool is paused (a refused token), every
// unfinished job says what it waits for; before, a job left ready by the
// pause showed an empty result.
func TestListViewsPaused(t *testing.T) {
	ready := state.Job{ID: 1, File: state.File{Path: "/in/a.ply"}, Stage: state.Ready}
	done := state.Job{ID: 2, File: state.File{Path: "/in/b.ply"}, Stage: state.Done}
	live := Live{Workers: 1, Paused: "the API to accept the token (all work is paused): v1_me: 401 Unauthorized"}
	views, err := ListViews(jobList{ready, done}, "", live)
	if err != nil {
		t.Fatal(err)
	}
	if views[0].WaitingFor != live.Paused || views[1].WaitingFor != "" {
		t.Errorf("waiting_for: ready %q, done %q; want the pause, and nothing", views[0].WaitingFor, views[1].WaitingFor)
	}
}

// TestRetryHints: a retry of a job that failed on its file's content warns
// that it fails again unless the file changed; a retry of another does not.
func TestRetryHints(t *testing.T) {
	bad := state.Job{ID: 1, File: state.File{Path: "/in/a.ply"}, Stage: state.Failed, Failure: state.Failure{FailReason: "invalid file: PLY body is 10 bytes short"}}
	net := state.Job{ID: 2, File: state.File{Path: "/in/b.ply"}, Stage: state.Failed, Failure: state.Failure{FailReason: "publish: 403 forbidden"}}
	src := jobList{bad, net}
	if h := RetryHints(src, "1"); len(h) != 1 || !strings.Contains(h[0], "it will fail again unless the file changed") || !strings.Contains(h[0], "PLY body is 10 bytes short") {
		t.Errorf("hints of job 1: %q", h)
	}
	if h := RetryHints(src, "2"); len(h) != 0 {
		t.Errorf("hints of job 2: %q, want none", h)
	}
	if h := RetryHints(src, "failed"); len(h) != 1 {
		t.Errorf("hints of -failed: %q, want job 1's", h)
	}
}
