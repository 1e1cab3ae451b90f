package uploader

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/apisim"
)

// rateParkEnv is a simulator whose publish route is in a strict class of
// one request per minute (the pacer caps a longer window at MaxWait, 2 min,
// with an unknown end), whose processing ends only when the test moves the
// simulator's clock on (30 s after the publish), and a pool whose commits
// are recorded.
type rateParkEnv struct {
	*workerEnv
	skew    atomic.Int64 // the simulator's clock ahead of the real one, ns
	commits *commitLog
}

func newRateParkedEnv(t *testing.T) *rateParkEnv {
	t.Helper()
	r := &rateParkEnv{}
	r.workerEnv = newWorkerEnv(t, apisim.Options{
		Now:             func() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) },
		ProcessingDelay: 30 * time.Second,
		Window:          time.Minute,
		Classes:         map[string]apisim.Class{apisim.RoutePublish: apisim.ClassStrict},
		Limits:          map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 1, apisim.ClassAssets: 100000},
	})
	r.commits = &commitLog{Store: r.store}
	return r
}

// options is the env's pool options, committing through the log.
func (r *rateParkEnv) options(workers int) PoolOptions {
	o := r.workerEnv.options(workers)
	o.Store = r.commits
	return o
}

// start runs a pool until the test ends.
func (r *rateParkEnv) start(o PoolOptions) *Pool { return runPool(r.t, o) }

// commitLog is a Store that records every commit as stored.
type commitLog struct {
	Store
	mu  sync.Mutex
	log []state.Job
}

func (c *commitLog) Commit(j state.Job, from state.Stage) (state.Job, error) {
	stored, err := c.Store.Commit(j, from)
	if err == nil {
		c.mu.Lock()
		c.log = append(c.log, stored)
		c.mu.Unlock()
	}
	return stored, err
}

func (c *commitLog) all() []state.Job {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]state.Job(nil), c.log...)
}

// parkedOnRateLimit says j waits in stage uploaded for the strict window's
// reset, parked (not in a worker).
func parkedOnRateLimit(j state.Job) bool {
	return j.Stage == state.Uploaded && j.RateLimited != nil && j.RateLimited.Class == "strict" &&
		j.NextAttempt.Equal(j.RateLimited.Until) && j.NextAttempt.After(j.UpdatedAt.Add(rateParkMin))
}

// TestPoolRateParkedJobGivesItsWorkerBack: with one worker, a publish delayed
// back for the strict window's reset (up to a minute away) parks its job in stage
// uploaded, and the worker goes on polling the job in processing (its
// route in the normal class, with budget) until it is done. Before, the
// worker sat in the pacer for the whole window: the processing job was not
// polled (a user saw "done" 20-58 s after "processing" for a 2 s
// processing) and due jobs said "waiting for a free worker (1 of 1 busy,
// 1 delayed by the rate limit)".
func TestPoolRateParkedJobGivesItsWorkerBack(t *testing.T) {
	t.Parallel()
	r := newRateParkedEnv(t)
	first, second := r.writePLY("first.ply", 40), r.writePLY("second.ply", 41)
	r.enqueue(first, second)
	pool := r.start(r.options(1))

	// The second job's publish meets the spent window while the first job
	// is processing: delayed (parked, or in the pacer as before) ...
	var delayed, processing state.Job
	r.waitFor("one job processing and the other delayed by the strict window", func() bool {
		delayed, processing = state.Job{}, state.Job{}
		delays := pool.RateDelays()
		for _, j := range r.jobs() {
			switch {
			case j.Stage == state.Processing:
				processing = j
			case parkedOnRateLimit(j) || j.Stage == state.Uploaded && delays[j.ID].Class == "strict":
				delayed = j
			}
		}
		return delayed.ID != 0 && processing.ID != 0
	})
	// ... then the processing ends (on the simulator's clock), and the one
	// worker, not delayed by the pacer, polls it to done.
	r.skew.Store(int64(40 * time.Second))
	r.waitFor("the processing job to be done", func() bool {
		j, _ := r.store.Get(processing.ID)
		return j.Stage == state.Done
	})
	parked, _ := r.store.Get(delayed.ID)
	if !parkedOnRateLimit(parked) {
		t.Errorf("the delayed job is not parked on the window: %s, next %v, %+v", parked.Stage, parked.NextAttempt, parked.RateLimited)
	}
	if running, _ := pool.Busy(); running[parked.ID] {
		t.Errorf("job %d is parked but a worker still holds it", parked.ID)
	}
	if parked.Attempts != 0 || parked.LastError != "" || parked.Publishes != 0 {
		t.Errorf("parked job: %d attempts, last error %q, %d publishes; want 0, none, 0: a park is not a failure",
			parked.Attempts, parked.LastError, parked.Publishes)
	}
	if w := parked.RateLimited; w == nil || w.Reason != "no request left in the window" {
		t.Errorf("parked job's wait %+v, want the spent window", w)
	}
	// The status page's pacing row counts it from the store (the daemon's
	// TestParkedOnCountsParkedJobs).
	st := r.sim.Stats()
	if n := st.Total(apisim.RoutePublish); n != 1 || st.RateLimited != 0 {
		t.Errorf("%d publish requests and %d 429s, want 1 and 0: the delayed publish is never sent", n, st.RateLimited)
	}
}

// TestPoolRateParkedPublishParksBeforeItsIntent: the publish slot is
// reserved before the publish intent is committed, so a delayed publish parks
// its job in stage uploaded: no job is ever committed in publishing
// without its POST allowed (a crash there would make an outcome uncertain
// whose request never left). Every commit into publishing is the one
// publish the window allows, and the others park before it.
func TestPoolRateParkedPublishParksBeforeItsIntent(t *testing.T) {
	t.Parallel()
	r := newRateParkedEnv(t)
	var files []string
	for i := range 4 {
		files = append(files, r.writePLY("p"+string(rune('a'+i))+".ply", 50+i))
	}
	r.enqueue(files...)
	r.start(r.options(2))
	r.waitFor("three jobs parked on the spent window", func() bool {
		n := 0
		for _, j := range r.jobs() {
			if j.RateLimited != nil {
				n++
			}
		}
		return n == 3
	})
	for _, j := range r.jobs() {
		if j.RateLimited != nil && !parkedOnRateLimit(j) {
			t.Errorf("job %d parked in stage %s (next %v, %+v); want uploaded, before its publish intent", j.ID, j.Stage, j.NextAttempt, j.RateLimited)
		}
	}
	intents := 0
	for _, j := range r.commits.all() {
		if j.Stage != state.Publishing {
			continue
		}
		intents++
		if j.RateLimited != nil || j.NextAttempt.After(time.Now()) {
			t.Errorf("job %d committed in publishing parked on the rate limit (%+v, next %v): its intent came before its slot", j.ID, j.RateLimited, j.NextAttempt)
		}
	}
	if n := r.sim.Stats().Total(apisim.RoutePublish); intents != 1 || n != 1 {
		t.Errorf("%d publish intents committed and %d publishes sent, want 1 and 1", intents, n)
	}
	for _, j := range r.jobs() {
		if j.Stage == state.Publishing {
			t.Errorf("job %d in publishing, its POST not sent", j.ID)
		}
	}
}

// waitRecorder records the pool's RateLimitWait calls.
type waitRecorder struct {
	NopObserver
	waits []time.Duration
}

func (w *waitRecorder) RateLimitWait(d time.Duration) { w.waits = append(w.waits, d) }

// TestParkedWaitIsCounted: the time a job waited parked on a rate-limit
// delay is counted in ratelimit_wait_seconds_total when it is claimed again,
// as a delayed request's wait in the pacer is: from its park (the commit) up to
// the delay's end, not the time it then waited for a worker. The job carries
// both, so a park from before a restart counts too; a job claimed unparked
// counts nothing.
func TestParkedWaitIsCounted(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	now := t0
	obs := &waitRecorder{}
	p := &Pool{o: PoolOptions{Observer: obs, Now: func() time.Time { return now }}}
	parkedJob := func(until time.Duration) state.Job {
		return state.Job{ID: 1, UpdatedAt: t0, Wait: state.Wait{RateLimited: &state.RateWait{Class: "strict", Until: t0.Add(until)}}}
	}
	now = t0.Add(10 * time.Second) // claimed early (a slot came back, or splatd retry)
	p.countParkedWait(parkedJob(30 * time.Second))
	now = t0.Add(time.Minute) // claimed 20 s after its delay ended
	p.countParkedWait(parkedJob(40 * time.Second))
	p.countParkedWait(state.Job{ID: 2, UpdatedAt: t0}) // never parked
	if want := []time.Duration{10 * time.Second, 40 * time.Second}; !slices.Equal(obs.waits, want) {
		t.Errorf("waits counted %v, want %v", obs.waits, want)
	}
}
