package uploader

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/pace"
)

// parkClockEnv is a simulator whose route strict is in a strict class of
// one request a minute, and one clock (the real one plus skew) for the
// simulator, the client's pacer and the pool: a test ends a park by moving
// that clock past the delay (resume) instead of waiting a window.
type parkClockEnv struct {
	*workerEnv
	skew atomic.Int64 // ns
}

func newParkClockEnv(t *testing.T, strict string) *parkClockEnv {
	t.Helper()
	r := &parkClockEnv{}
	r.workerEnv = newV1Env(t, apisim.Options{
		Now:     r.now,
		Window:  time.Minute,
		Classes: map[string]apisim.Class{strict: apisim.ClassStrict},
		Limits:  map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 1, apisim.ClassAssets: 100000},
	})
	c, err := api.NewClient(api.ClientOptions{BaseURL: r.sim.URL(), Token: r.sim.Token(), RootCAs: r.sim.CertPool(),
		Timeout: 10 * time.Second, Pacer: pace.New(pace.Options{Now: r.now})})
	if err != nil {
		t.Fatal(err)
	}
	r.client = c
	return r
}

// learnV1Routes sends one request (for no session: 404) on each v1 write
// route a job uses after its create, so that the pacer knows their class
// (normal) as a daemon's pacer state file keeps it: the first request of a
// route of unknown class is a probe, which waits while any class it may be
// in, the spent strict one too, has nothing left.
func (r *parkClockEnv) learnV1Routes() {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.client.PartURLs(ctx, "no-such-upload", []int{1}); state.HTTPStatus(err) != http.StatusNotFound {
		r.t.Fatalf("part-upload-urls of no session: %v, want 404", err)
	}
	if _, _, err := r.client.CompleteUpload(ctx, "no-such-upload", []api.CompletedPart{{PartNumber: 1, ETag: `"x"`}}); state.HTTPStatus(err) != http.StatusNotFound {
		r.t.Fatalf("complete of no session: %v, want 404", err)
	}
}

func (r *parkClockEnv) now() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }

// pool returns o on the env's clock. A resume moves the clock a window
// on: the poll timeout is an hour, so that a job then processing is not
// timed out by it.
func (r *parkClockEnv) pool(o PoolOptions) PoolOptions {
	o.Store, o.Now, o.Client = r.store, r.now, r.client
	o.Timing.Poll.Timeout = time.Hour
	return o
}

// start runs a pool until the test ends.
func (r *parkClockEnv) start(o PoolOptions) *Pool { return runPool(r.t, o) }

// parkedIn says j waits in stage for the strict window's reset, parked:
// not an attempt, no error.
func parkedIn(j state.Job, stage state.Stage) bool {
	return j.Stage == stage && j.RateLimited != nil && j.RateLimited.Class == "strict" &&
		j.NextAttempt.Equal(j.RateLimited.Until) && j.Attempts == 0 && j.LastError == ""
}

// waitParked waits for a job parked in stage and returns it as stored.
func (r *parkClockEnv) waitParked(stage state.Stage) state.Job {
	r.t.Helper()
	var delayed state.Job
	r.waitFor("a job parked in "+string(stage)+" on the strict window", func() bool {
		for _, j := range r.jobs() {
			if parkedIn(j, stage) {
				delayed = j
				return true
			}
		}
		return false
	})
	return delayed
}

// resume moves the clock 2 s past delayed's delay (and so past the window's
// reset) and wakes the pool, which claims the job again at once.
func (r *parkClockEnv) resume(pool *Pool, delayed state.Job) {
	r.skew.Add(int64(delayed.NextAttempt.Sub(r.now()) + 2*time.Second))
	pool.Wake()
}

func (r *parkClockEnv) waitAllFinal() {
	r.t.Helper()
	r.waitFor("every job final", func() bool { return r.unfinished() == 0 })
}

// TestPoolRateParkedV1CreateParksUncounted: a v1 create delayed by the
// spent strict window parks its job in stage ready with the create intent's
// count undone (the create never left), and the job later creates its
// session once: each job's Creates is the number of creates the server saw
// under its key. (In one daemon the count has no other effect: a create
// answered 201 is ours whatever it says. Where it matters is the fleet
// case, TestPoolRateParkedV1CreateOfAPeersSession.)
func TestPoolRateParkedV1CreateParksUncounted(t *testing.T) {
	t.Parallel()
	r := newParkClockEnv(t, apisim.RouteV1CreateUpload)
	r.learnV1Routes()
	first, second := r.writePLY("first.ply", 40), r.writePLY("second.ply", 41)
	r.enqueue(first, second)
	pool := r.start(r.pool(r.v1Options(1)))

	delayed := r.waitParked(state.Ready)
	if delayed.V1 == nil || delayed.V1.Creates != 0 {
		t.Errorf("parked job's session %+v: want Creates 0, its create never sent", delayed.V1)
	}
	if n := r.sim.Stats().Total(apisim.RouteV1CreateUpload); n != 1 {
		t.Errorf("%d creates sent while one job is parked before its create, want 1", n)
	}
	r.resume(pool, delayed)
	r.waitAllFinal()

	r.checkV1Once(first, second)
	st := r.sim.Stats()
	if n := st.Total(apisim.RouteV1CreateUpload); n != 2 || st.Creates != 2 || st.CreateReplays != 0 || st.RateLimited != 0 {
		t.Errorf("%d creates sent (%d sessions created, %d replays, %d 429s), want 2, 2, 0, 0", n, st.Creates, st.CreateReplays, st.RateLimited)
	}
	if n := len(r.sim.Sessions()); n != 2 || st.V1Splats != 2 {
		t.Errorf("%d sessions, %d splats; want 2 and 2", n, st.V1Splats)
	}
	for _, p := range []string{first, second} {
		if j := r.job(p); j.V1.Creates != 1 || j.Attempts != 0 {
			t.Errorf("%s: Creates %d (attempts %d), want 1: the server saw one create under its key", p, j.V1.Creates, j.Attempts)
		}
	}
}

// TestPoolRateParkedV1CreateOfAPeersSession is the fleet case the undone
// count is for: a peer daemon created the session under the content's key
// (spending the strict window) and is sending its parts; our job's create
// is parked, then sent, and answered 200 with the peer's session. That
// answer to our first create under the key is a peer's session: the job
// watches it instead of sending the parts beside the peer, and takes the
// peer's outcome. Had the parked create stayed counted, the 200 would
// count as the answer to a second create of ours (Owned = Creates > 1) and
// the job would upload every part the peer had not yet sent.
func TestPoolRateParkedV1CreateOfAPeersSession(t *testing.T) {
	t.Parallel()
	r := newParkClockEnv(t, apisim.RouteV1CreateUpload)
	r.learnV1Routes()
	path := r.writeParts("peer.ply", 3)
	s, key, size, peerSends := peerSession(t, r.client, path)
	if err := peerSends(1, 1); err != nil {
		t.Fatal(err)
	}
	r.enqueue(path)
	o := r.pool(r.v1Options(1)) // PeerWait an hour: the job never takes the session over
	var watched, owned atomic.Bool
	peerErr := make(chan error, 1)
	o.workerHook = func(point string, j state.Job) error {
		if point == "commit:signed" && j.V1.Owned {
			owned.Store(true)
		}
		if point == "commit:signed" && j.Parked != "" && !watched.Swap(true) {
			// The job watches the peer's session: the peer finishes it.
			go func() { peerErr <- peerSends(2, 3) }()
		}
		return nil
	}
	pool := r.start(o)

	delayed := r.waitParked(state.Ready)
	if delayed.V1 == nil || delayed.V1.Key != key || delayed.V1.Creates != 0 {
		t.Errorf("parked job's session %+v: want key %s, Creates 0", delayed.V1, key)
	}
	r.resume(pool, delayed)
	r.waitAllFinal()
	if watched.Load() {
		if err := <-peerErr; err != nil {
			t.Fatal(err)
		}
	}

	if owned.Load() {
		t.Error("job committed in signed owning the peer's session: its parts go out beside the peer's")
	}
	if !watched.Load() {
		t.Error("the job never watched the peer's session")
	}
	r.checkV1Once(path)
	j := r.job(path)
	_, ss := r.session(key)
	if j.V1.Creates != 1 || j.V1.Owned || j.V1.ID != s.ID {
		t.Errorf("job's session %s: Creates %d, owned %v; want the peer's %s, 1, false", j.V1.ID, j.V1.Creates, j.V1.Owned, s.ID)
	}
	if ss.PartsResent != 0 || ss.BytesReceived != size {
		t.Errorf("storage received %d bytes for a %d-byte file (%d parts resent)", ss.BytesReceived, size, ss.PartsResent)
	}
	st := r.sim.Stats()
	if st.Creates != 1 || st.CreateReplays != 1 || len(r.sim.Sessions()) != 1 || st.V1Splats != 1 {
		t.Errorf("%d sessions created, %d create replays, %d sessions, %d splats; want 1 (the peer's), 1 (ours), 1, 1",
			st.Creates, st.CreateReplays, len(r.sim.Sessions()), st.V1Splats)
	}
}

// TestPoolRateParkedV1CompleteParksInPublishing: a v1 complete delayed by
// the spent strict window parks its job in publishing (the stage the
// complete runs in) with no publish counted, and the job later completes:
// one complete sent per file, each job's Publishes 1.
func TestPoolRateParkedV1CompleteParksInPublishing(t *testing.T) {
	t.Parallel()
	r := newParkClockEnv(t, apisim.RouteV1Complete)
	first, second := r.writePLY("first.ply", 40), r.writePLY("second.ply", 41)
	r.enqueue(first, second)
	pool := r.start(r.pool(r.v1Options(1)))

	delayed := r.waitParked(state.Publishing)
	if delayed.Publishes != 0 || delayed.SplatID != "" || delayed.V1 == nil || delayed.V1.Verify || delayed.V1.Resyncs != 0 {
		t.Errorf("parked job: %d publishes, splat %q, session %+v; want 0, none, no resync: its complete never left",
			delayed.Publishes, delayed.SplatID, delayed.V1)
	}
	if st := r.sim.Stats(); st.Total(apisim.RouteV1Complete) != 1 {
		t.Errorf("%d completes sent while one job is parked before its complete, want 1", st.Total(apisim.RouteV1Complete))
	}
	r.resume(pool, delayed)
	r.waitAllFinal()

	r.checkV1Once(first, second)
	st := r.sim.Stats()
	if n := st.Total(apisim.RouteV1Complete); n != 2 || st.Completes != 2 || st.CompleteReplays != 0 || st.RateLimited != 0 {
		t.Errorf("%d completes sent (%d created a splat, %d replays, %d 429s), want 2, 2, 0, 0", n, st.Completes, st.CompleteReplays, st.RateLimited)
	}
	for _, p := range []string{first, second} {
		if j := r.job(p); j.Publishes != 1 || j.Attempts != 0 {
			t.Errorf("%s: Publishes %d (attempts %d), want 1: one complete sent", p, j.Publishes, j.Attempts)
		}
	}
}

// TestPoolRateParkedV1FirstSigningParks: on a fresh state (no route's class
// known), a job's first part-upload-urls request is a probe, delayed while
// the strict class it may be in is spent (by the job's own create) until
// the window's reset. With no part in flight yet, it parks the job in
// signed instead of holding its worker for the window; resumed, the job
// sends its parts and publishes once.
func TestPoolRateParkedV1FirstSigningParks(t *testing.T) {
	t.Parallel()
	r := newParkClockEnv(t, apisim.RouteV1CreateUpload) // no learnV1Routes: a fresh state
	path := r.writePLY("scan.ply", 40)
	r.enqueue(path)
	pool := r.start(r.pool(r.v1Options(1)))

	var delayed state.Job
	r.waitFor("the job parked in signed on the probe's delay", func() bool {
		delayed, _ = r.store.Get(1)
		return delayed.Stage == state.Signed && delayed.RateLimited != nil
	})
	// The route's class is not known yet: its delay is "unknown", until the
	// strict window's reset.
	if w := delayed.RateLimited; w.Class != "unknown" || !delayed.NextAttempt.Equal(w.Until) || w.Until.Before(r.now().Add(rateParkMin)) ||
		delayed.Attempts != 0 || delayed.LastError != "" {
		t.Errorf("parked job: wait %+v, next %v, %d attempts, last error %q; want unknown until the reset, no attempt",
			w, delayed.NextAttempt, delayed.Attempts, delayed.LastError)
	}
	// Blocked in the pacer, the worker would hold the job for the window.
	r.waitFor("the worker to let the parked job go", func() bool {
		running, _ := pool.Busy()
		return !running[delayed.ID]
	})
	if n := r.sim.Stats().Total(apisim.RouteV1PartURLs); n != 0 {
		t.Errorf("%d part-upload-urls requests sent while the job is parked before its first, want 0", n)
	}
	r.resume(pool, delayed)
	r.waitAllFinal()
	r.checkV1Once(path)
	if st := r.sim.Stats(); st.RateLimited != 0 || st.Creates != 1 {
		t.Errorf("%d 429s, %d sessions created; want 0 and 1", st.RateLimited, st.Creates)
	}
}

// TestPoolRateParkedUncertainRepublishParks: a legacy job found in publishing
// after a crash (uncertain; publish.on_uncertain: republish) has no
// reserved slot; its publish delayed by the spent strict window parks it
// in publishing, still uncertain and with no publish counted, and it later
// publishes once.
func TestPoolRateParkedUncertainRepublishParks(t *testing.T) {
	t.Parallel()
	r := newParkClockEnv(t, apisim.RoutePublish)
	path := r.writePLY("scan.ply", 40)
	r.enqueue(path)

	// The first run dies right after its publish intent is committed.
	o := r.pool(r.options(1))
	o.workerHook = func(point string, j state.Job) error {
		if point == "commit:publishing" {
			return errors.New("killed after the publish intent")
		}
		return nil
	}
	first, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := first.Run(ctx); !errors.Is(err, errWorkerCrash) {
		t.Fatalf("first run: %v, want the simulated crash", err)
	}
	r.reopen()
	if j, _ := r.store.Get(1); j.Stage != state.Publishing || !j.Uncertain {
		t.Fatalf("after the crash: %s uncertain %v, want publishing, uncertain", j.Stage, j.Uncertain)
	}
	// Another client of the token spends the publish window; the pacer
	// learns it from the answer.
	if _, err := r.client.Publish(ctx, api.PublishRequest{Key: "spent-by-another-client"}); state.HTTPStatus(err) != http.StatusBadRequest {
		t.Fatalf("window-spending publish: %v, want 400", err)
	}

	o = r.pool(r.options(1))
	o.OnUncertain = UncertainRepublish
	pool := r.start(o)
	delayed := r.waitParked(state.Publishing)
	if !delayed.Uncertain || delayed.Publishes != 0 {
		t.Errorf("parked job: uncertain %v, %d publishes; want still uncertain, 0", delayed.Uncertain, delayed.Publishes)
	}
	if n := r.sim.Stats().Total(apisim.RoutePublish); n != 1 {
		t.Errorf("%d publishes sent while the job is parked, want 1 (the other client's)", n)
	}
	r.resume(pool, delayed)
	r.waitAllFinal()

	r.checkOnce(path)
	j, _ := r.store.Get(1)
	if j.Stage != state.Done || j.Publishes != 1 || j.Attempts != 0 {
		t.Errorf("job %s with %d publishes (attempts %d), want done, 1", j.Stage, j.Publishes, j.Attempts)
	}
	if st := r.sim.Stats(); st.Total(apisim.RoutePublish) != 2 || st.Publishes != 1 || st.RateLimited != 0 {
		t.Errorf("%d publish requests, %d splats, %d 429s; want 2 (one the other client's), 1, 0",
			st.Total(apisim.RoutePublish), st.Publishes, st.RateLimited)
	}
}
