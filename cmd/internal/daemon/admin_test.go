package daemon

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
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
	parked := state.Job{ID: 1, Path: "/in/a.ply", Stage: state.Uploaded, NextAttempt: until,
		RateLimited: &state.RateWait{Class: "strict", Reason: "no request left in the window", Until: until}}
	stale := state.Job{ID: 2, Path: "/in/b.ply", Stage: state.Uploaded, NextAttempt: now.Add(-time.Second),
		RateLimited: &state.RateWait{Class: "strict", Reason: "no request left in the window", Until: now.Add(-time.Second)}}
	running := state.Job{ID: 3, Path: "/in/c.ply", Stage: state.Signed, NextAttempt: now.Add(-time.Minute)}
	live := Live{Running: map[uint64]bool{3: true}, Workers: 1, Holds: map[uint64]pace.Hold{}}

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
