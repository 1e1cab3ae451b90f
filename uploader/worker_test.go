package uploader

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
	"github.com/splatd/splatd/uploader/splatfile"
	"github.com/splatd/splatd/uploader/step/steptest"
)

// workerEnv is one test's simulator, client, store and files.
type workerEnv struct {
	t        *testing.T
	sim      *apisim.Server
	client   *api.Client
	stateDir string
	files    string
	store    *queue.Store
	finished sync.Map // job id → number of Finish calls
}

func newWorkerEnv(t *testing.T, so apisim.Options) *workerEnv {
	t.Helper()
	if so.ProcessingDelay == 0 {
		so.ProcessingDelay = 20 * time.Millisecond
	}
	if so.Seed == 0 {
		so.Seed = 7
	}
	sim, c := steptest.Sim(t, so) // rate limits lifted: tests measure the worker, not the pacer
	e := &workerEnv{t: t, sim: sim, client: c, stateDir: t.TempDir(), files: t.TempDir()}
	e.reopen()
	return e
}

// reopen closes the store (if open) and opens it again: the in-memory
// state of the previous "process" is gone.
func (e *workerEnv) reopen() {
	e.t.Helper()
	if e.store != nil {
		e.store.Close()
	}
	s, err := queue.Open(e.stateDir, queue.Options{LockTimeout: time.Second, DedupeWait: 10 * time.Millisecond})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = s
	e.t.Cleanup(func() { s.Close() })
}

// writePLY writes a valid PLY with n splats at dir/name and returns its path.
func (e *workerEnv) writePLY(name string, n int) string {
	e.t.Helper()
	var b bytes.Buffer
	if err := splatfile.WritePLY(&b, n); err != nil {
		e.t.Fatal(err)
	}
	p := filepath.Join(e.files, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *workerEnv) enqueue(paths ...string) {
	e.t.Helper()
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.store.EnqueueBatch(context.Background(), []queue.Candidate{{Path: p, Root: e.files, Size: fi.Size(), ModTime: fi.ModTime()}}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *workerEnv) options(workers int) PoolOptions {
	return PoolOptions{
		Store: e.store, Client: e.client, Workers: workers,
		Files: SidecarFiles{Publish: state.PublishParams{Title: "{{.Stem}}", Format: "sog"}},
		Timing: Timing{
			Poll: PollOptions{Interval: 5 * time.Millisecond, MaxInterval: 40 * time.Millisecond, Timeout: time.Minute}, Settle: 5 * time.Millisecond,
			Patience: map[state.Profile]state.Patience{
				state.ProfileJob:   {Backoff: state.Backoff{Base: 2 * time.Millisecond, Cap: 30 * time.Millisecond, Jitter: state.EqualJitter}},
				state.ProfilePart:  {Backoff: state.Backoff{Base: 2 * time.Millisecond, Cap: 30 * time.Millisecond, Jitter: state.EqualJitter}},
				state.ProfileToken: {Backoff: state.Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: state.NoJitter}},
				state.ProfileStore: {Backoff: state.Backoff{Base: 5 * time.Millisecond, Cap: 20 * time.Millisecond, Jitter: state.NoJitter}},
			},
		},
		After: finishFunc(func(_ context.Context, j state.Job) error {
			n, _ := e.finished.LoadOrStore(j.ID, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			return nil
		}),
		Logger: zerolog.New(zerolog.NewTestWriter(e.t)).Level(zerolog.WarnLevel),
	}
}

// run runs a pool until every job is final (or the pool stops) and returns
// Run's error.
func (e *workerEnv) run(o PoolOptions) error {
	e.t.Helper()
	p, err := NewPool(o)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-errc:
			return err
		case <-tick.C:
			// Final and finalized: a job already final at start (a crash
			// after its last commit) still has its Finish hook to run.
			if pending, err := e.store.Unfinalized(); e.unfinished() == 0 && err == nil && len(pending) == 0 {
				cancel()
				return <-errc
			}
		case <-ctx.Done():
			e.t.Fatalf("jobs not final in time: %+v", e.stats())
		}
	}
}

// waitFor polls cond until it holds; it fails the test with the store's
// state after 20 s instead of hanging.
func (e *workerEnv) waitFor(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s; jobs: %+v", what, e.jobs())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (e *workerEnv) stats() queue.Stats {
	st, err := e.store.Stats()
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *workerEnv) unfinished() int {
	st := e.stats()
	return st.Jobs - st.Stages[state.Done] - st.Stages[state.Failed] - st.Stages[state.Held]
}

func (e *workerEnv) jobs() []state.Job {
	e.t.Helper()
	js, err := e.store.List(queue.Filter{})
	if err != nil {
		e.t.Fatal(err)
	}
	return js
}

func workerFileSHA(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkOnce asserts that each file's content was published exactly once
// and nothing else was published.
func (e *workerEnv) checkOnce(paths ...string) {
	e.t.Helper()
	pubs := e.sim.PublishesByHash()
	want := map[string]bool{}
	for _, p := range paths {
		h := workerFileSHA(e.t, p)
		want[h] = true
		if pubs[h] != 1 {
			e.t.Errorf("%s published %d times, want 1", filepath.Base(p), pubs[h])
		}
	}
	for h, n := range pubs {
		if !want[h] {
			e.t.Errorf("unexpected content %s published %d times", h[:12], n)
		}
	}
}

func TestWorkerPublishesEveryFile(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	var paths []string
	for i := range 6 {
		paths = append(paths, e.writePLY(fmt.Sprintf("scan-%d.ply", i), 50+i))
	}
	e.enqueue(paths...)
	if err := e.run(e.options(3)); err != nil {
		t.Fatal(err)
	}
	e.checkOnce(paths...)
	for _, j := range e.jobs() {
		if j.Stage != state.Done || j.SplatID == "" || j.ViewerURL == "" || j.CompletedAt == nil || j.PublishedAt == nil ||
			j.Publishes != 1 || !j.Finalized || j.Params.Title != strings.TrimSuffix(filepath.Base(j.Path), ".ply") {
			t.Errorf("job: %+v", j)
		}
		rec, ok := e.sim.Splat(j.SplatID)
		if !ok || rec.Title != j.Params.Title || rec.Format != "sog" || rec.ObjectSHA256 != j.SHA256 {
			t.Errorf("server record of job %d: %+v", j.ID, rec)
		}
		if n, _ := e.finished.Load(j.ID); n == nil || n.(*atomic.Int32).Load() != 1 {
			t.Errorf("Finish of job %d not called exactly once", j.ID)
		}
	}
}

func TestWorkerDuplicateContentPublishedOnce(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	a := e.writePLY("a/scan.ply", 80)
	b := e.writePLY("b/renamed-copy.ply", 80)
	c := e.writePLY("c/other.ply", 81)
	e.enqueue(a, b, c)
	if err := e.run(e.options(2)); err != nil {
		t.Fatal(err)
	}
	e.checkOnce(a, c)
	var dups int
	for _, j := range e.jobs() {
		if j.Stage != state.Done {
			t.Errorf("job %d %s", j.ID, j.Stage)
		}
		if j.DuplicateOf != 0 {
			dups++
			if j.SplatID == "" || j.Upload.Key != "" {
				t.Errorf("duplicate job: %+v", j)
			}
		}
	}
	if dups != 1 {
		t.Errorf("%d duplicates, want 1", dups)
	}
}

func TestWorkerInvalidAndIncompleteFiles(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	bad := filepath.Join(e.files, "bad.ply")
	if err := os.WriteFile(bad, []byte("not a ply at all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	full := e.writePLY("growing.ply", 60)
	data, _ := os.ReadFile(full)
	if err := os.WriteFile(full, data[:len(data)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	e.enqueue(bad, full)
	p, err := NewPool(e.options(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	// Wait for the invalid one to fail and the short one to be retried.
	e.waitFor("the invalid file to fail and the short one to wait", func() bool {
		j1, _ := e.store.Get(1)
		j2, _ := e.store.Get(2)
		return j1.Stage == state.Failed && j2.Attempts >= 2
	})
	if j2, _ := e.store.Get(2); j2.Stage != state.Queued {
		t.Fatalf("incomplete file left queued: %s", j2.Stage)
	}
	// The writer finishes the file: it is then published.
	if err := os.WriteFile(full, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitFor("all jobs final", func() bool { return e.unfinished() == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j1, _ := e.store.Get(1)
	if !strings.HasPrefix(j1.FailReason, "invalid file: ") {
		t.Errorf("fail reason: %q", j1.FailReason)
	}
	e.checkOnce(full)
	if st := e.sim.Stats(); st.SignedURLs != 1 {
		t.Errorf("signed URLs: %d (the invalid file must never be uploaded)", st.SignedURLs)
	}
}

func TestWorkerFileChangedDuringUpload(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	p := e.writePLY("scan.ply", 70)
	e.enqueue(p)
	stale := workerFileSHA(t, p)
	o := e.options(1)
	var once sync.Once
	o.workerHook = func(point string, j state.Job) error {
		// "put" is right after the PUT, before the file is checked again:
		// as if the writer touched it during the upload.
		if point == "put" {
			once.Do(func() {
				var b bytes.Buffer
				_ = splatfile.WritePLY(&b, 71)
				_ = os.WriteFile(p, b.Bytes(), 0o644)
				future := time.Now().Add(time.Second)
				_ = os.Chtimes(p, future, future)
			})
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	if n := e.sim.PublishesByHash()[stale]; n != 0 {
		t.Errorf("stale content published %d times", n)
	}
	e.checkOnce(p)
	if st := e.sim.Stats(); st.Uploads != 2 {
		t.Errorf("uploads = %d, want 2 (stale one, then the new content)", st.Uploads)
	}
}

func TestWorkerFaults(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{Faults: apisim.Faults{
		StorageErrorRate:     0.3,
		StorageResetRate:     0.1,
		StorageForbiddenRate: 0.1, // URL expired mid-flight
		ErrorRate:            map[string]float64{apisim.RoutePublish: 0.2, apisim.RouteSignedURL: 0.1, apisim.RouteGetSplat: 0.1},
	}})
	var paths []string
	n := 24
	if testing.Short() {
		n = 8
	}
	for i := range n {
		paths = append(paths, e.writePLY(fmt.Sprintf("f%02d.ply", i), 40+i))
	}
	e.enqueue(paths...)
	if err := e.run(e.options(4)); err != nil {
		t.Fatal(err)
	}
	for _, j := range e.jobs() {
		if j.Stage != state.Done {
			t.Errorf("job %d: %s %s", j.ID, j.Stage, j.FailReason)
		}
	}
	e.checkOnce(paths...)
	st := e.sim.Stats()
	t.Logf("faults injected: %d (resets %d); uploads %d; publishes %d", st.Faults, st.UploadResets, st.Uploads, st.Publishes)
	if st.Faults == 0 {
		t.Error("no fault was injected: the test proves nothing")
	}
}

func TestWorkerOldSignedURLIsSignedAgain(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	p := e.writePLY("scan.ply", 30)
	e.enqueue(p)
	o := e.options(1)
	o.Timing.URLMaxAge = time.Minute
	// The clock jumps two minutes between sign and PUT.
	var skew atomic.Int64
	o.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	o.workerHook = func(point string, j state.Job) error {
		if point == "commit:signed" {
			skew.CompareAndSwap(0, int64(2*time.Minute))
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	e.checkOnce(p)
	if st := e.sim.Stats(); st.SignedURLs != 2 || st.Uploads != 1 {
		t.Errorf("signed %d, uploads %d; want 2, 1", st.SignedURLs, st.Uploads)
	}
}

func TestWorkerAuthPausesAndResumes(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	good := e.sim.Token()
	e.sim.SetTokens("someone-else")
	var paths []string
	for i := range 4 {
		paths = append(paths, e.writePLY(fmt.Sprintf("f%d.ply", i), 30+i))
	}
	e.enqueue(paths...)
	o := e.options(3)
	var logs lockedBuffer
	o.Logger = zerolog.New(&logs)
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e.waitFor("the pool to pause", func() bool { return p.Paused() != nil })
	// Several probe rounds while paused.
	e.waitFor("probes", func() bool { return e.sim.Stats().Unauthorized >= 4 })
	for _, j := range e.jobs() {
		if j.Stage.Final() || j.Stage == state.Signed || (j.Stage == state.Ready && j.Attempts != 0) {
			t.Errorf("job %d while paused: %s attempts=%d", j.ID, j.Stage, j.Attempts)
		}
	}
	// Paused workers do not hammer: every 401 is the prober's (one logged
	// line each) or a worker's that was in flight when the first came (at
	// most one per worker). Counted in that order, at most one probe is
	// answered but not yet logged.
	unauth := e.sim.Stats().Unauthorized
	probes := strings.Count(logs.String(), "API still refuses the token")
	if unauth > probes+o.Workers+1 {
		t.Errorf("%d answers 401 while paused; want at most %d probes + %d workers in flight + 1", unauth, probes, o.Workers)
	}
	e.sim.SetTokens(good)
	e.waitFor("all jobs final", func() bool { return e.unfinished() == 0 })
	if p.Paused() != nil {
		t.Error("still paused after the token was accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.checkOnce(paths...)
	t.Logf("401 answers while paused: %d (%d probes)", unauth, probes)
}

// lockedBuffer is a bytes.Buffer safe for a logger and a reader at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestWorkerProcessingOutcomes(t *testing.T) {
	t.Parallel()
	t.Run("failed", func(t *testing.T) {
		t.Parallel()
		e := newWorkerEnv(t, apisim.Options{Faults: apisim.Faults{ProcessingFailRate: 1}})
		e.enqueue(e.writePLY("a.ply", 30))
		if err := e.run(e.options(1)); err != nil {
			t.Fatal(err)
		}
		j, _ := e.store.Get(1)
		if j.Stage != state.Failed || j.TaskMessage == "" || !strings.Contains(j.FailReason, j.TaskMessage) {
			t.Errorf("job: stage %s reason %q message %q", j.Stage, j.FailReason, j.TaskMessage)
		}
	})
	t.Run("unknown status then timeout", func(t *testing.T) {
		t.Parallel()
		e := newWorkerEnv(t, apisim.Options{SuccessStatus: "mystery"})
		e.enqueue(e.writePLY("a.ply", 30))
		o := e.options(1)
		o.Timing.Poll.Timeout = 300 * time.Millisecond
		if err := e.run(o); err != nil {
			t.Fatal(err)
		}
		j, _ := e.store.Get(1)
		if j.Stage != state.Failed || !strings.Contains(j.FailReason, `did not finish within 300ms; last status "mystery"`) {
			t.Errorf("job: stage %s reason %q", j.Stage, j.FailReason)
		}
	})
	t.Run("uncertain publish, hold", func(t *testing.T) {
		t.Parallel()
		e := newWorkerEnv(t, apisim.Options{Faults: apisim.Faults{UncertainPublishes: 1}})
		e.enqueue(e.writePLY("a.ply", 30))
		o := e.options(1)
		o.OnUncertain = UncertainHold
		if err := e.run(o); err != nil {
			t.Fatal(err)
		}
		j, _ := e.store.Get(1)
		if j.Stage != state.Held || j.Publishes != 1 || e.sim.Stats().Publishes != 1 {
			t.Errorf("job: %s publishes %d; server %d", j.Stage, j.Publishes, e.sim.Stats().Publishes)
		}
	})
}

// TestWorkerCrashAtEveryBoundary stops the pool (dropping every in-memory
// state and the store handle) right after each commit, before the next
// side effect, and right after each side effect, before its commit; a new
// pool on the reopened store must finish the job with one publish. The one
// boundary that cannot be exactly-once without server help is "publish
// answered, commit lost": it is checked for both on_uncertain policies.
func TestWorkerCrashAtEveryBoundary(t *testing.T) {
	t.Parallel()
	points := []string{
		"effect:queued", "commit:ready",
		"effect:ready", "commit:signed",
		"put", "effect:signed", "commit:uploaded",
		"effect:uploaded", "commit:publishing",
		"effect:publishing", "commit:processing",
		"effect:processing", "commit:done",
	}
	for _, point := range points {
		for _, policy := range []string{UncertainRepublish, UncertainHold} {
			if policy == UncertainHold && point != "effect:publishing" && point != "commit:publishing" {
				continue
			}
			t.Run(point+"/"+policy, func(t *testing.T) {
				t.Parallel()
				e := newWorkerEnv(t, apisim.Options{ProcessingDelay: -1})
				p := e.writePLY("scan.ply", 40)
				e.enqueue(p)
				o := e.options(1)
				o.OnUncertain = policy
				var hit atomic.Bool
				o.workerHook = func(pt string, j state.Job) error {
					if pt == point && hit.CompareAndSwap(false, true) {
						return errors.New("kill")
					}
					return nil
				}
				// The first run ends only by the simulated crash.
				pool, err := NewPool(o)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := pool.Run(ctx); !errors.Is(err, errWorkerCrash) {
					t.Fatalf("first run: %v (hook hit: %v)", err, hit.Load())
				}
				if point == "commit:done" {
					if j, _ := e.store.Get(1); j.Stage != state.Done || j.Finalized {
						t.Fatalf("after the crash: %s finalized=%v", j.Stage, j.Finalized)
					}
				}
				e.reopen()
				o = e.options(1)
				o.OnUncertain = policy
				o.Store = e.store
				if err := e.run(o); err != nil {
					t.Fatal(err)
				}
				j, _ := e.store.Get(1)
				pubs := e.sim.PublishesByHash()[j.SHA256]
				switch {
				case point == "effect:publishing" && policy == UncertainRepublish:
					// At-least-once by design: the answer was lost.
					if j.Stage != state.Done || pubs != 2 {
						t.Errorf("stage %s, publishes %d; want done, 2", j.Stage, pubs)
					}
				case point == "effect:publishing" && policy == UncertainHold:
					if j.Stage != state.Held || pubs != 1 {
						t.Errorf("stage %s, publishes %d; want held, 1", j.Stage, pubs)
					}
				case point == "commit:publishing" && policy == UncertainHold:
					// Intent committed, call never made: still unknown to us.
					if j.Stage != state.Held || pubs != 0 {
						t.Errorf("stage %s, publishes %d; want held, 0", j.Stage, pubs)
					}
				case point == "commit:publishing":
					if j.Stage != state.Done || pubs != 1 {
						t.Errorf("stage %s, publishes %d; want done, 1", j.Stage, pubs)
					}
				default:
					if j.Stage != state.Done || pubs != 1 {
						t.Errorf("stage %s, publishes %d; want done, 1", j.Stage, pubs)
					}
				}
				if !j.Finalized {
					t.Error("Finish not run after the crash")
				}
			})
		}
	}
}

// workerFailingStore fails its first n commits as a full disk would; the
// commits that record a publish's answer (→ processing) fail first, since
// redoing that step would publish twice.
type workerFailingStore struct {
	*queue.Store
	left, leftAfterPublish atomic.Int32
}

func (s *workerFailingStore) Commit(j state.Job, from state.Stage) (state.Job, error) {
	if j.Stage == state.Processing && from == state.Publishing && s.leftAfterPublish.Add(-1) >= 0 {
		return state.Job{}, fmt.Errorf("write splatd.db: no space left on device")
	}
	if s.left.Add(-1) >= 0 {
		return state.Job{}, fmt.Errorf("write splatd.db: no space left on device")
	}
	return s.Store.Commit(j, from)
}

// TestWorkerSurvivesStoreFailures: commits that fail (a full disk) do not
// stop the pool; the jobs redo their step and finish once the store works,
// each published once, and StoreError reports the trouble meanwhile.
func TestWorkerSurvivesStoreFailures(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	paths := []string{e.writePLY("a.ply", 30), e.writePLY("b.ply", 31)}
	e.enqueue(paths...)
	fs := &workerFailingStore{Store: e.store}
	fs.left.Store(6)
	fs.leftAfterPublish.Store(4)
	o := e.options(2)
	o.Store = fs
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	sawTrouble := false
	e.waitFor("jobs done despite failing commits", func() bool {
		select {
		case err := <-errc:
			t.Fatalf("pool stopped: %v", err)
		default:
		}
		if p.StoreError() != nil {
			sawTrouble = true
		}
		return e.unfinished() == 0
	})
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if !sawTrouble {
		t.Error("StoreError never reported the failing store")
	}
	if err := p.StoreError(); err != nil {
		t.Errorf("StoreError after recovery = %v", err)
	}
	e.checkOnce(paths...)
}

// TestWorkerFileChangedAfterUpload: a file rewritten while its job waits in
// uploaded (for a publish slot, a 401 pause, a restart) is hashed and
// uploaded again; the stale upload is never published. Enqueue refuses the
// new version meanwhile (the job is in flight), so the job must notice.
func TestWorkerFileChangedAfterUpload(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	p := e.writePLY("rewritten.ply", 100)
	stale := workerFileSHA(t, p)
	e.enqueue(p)
	o := e.options(1)
	var once sync.Once
	o.workerHook = func(point string, j state.Job) error {
		if point == "commit:uploaded" {
			once.Do(func() {
				e.writePLY("rewritten.ply", 200) // the capture tool rewrites it
				e.enqueue(p)                     // the watcher reports it; no new job
			})
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	fresh := workerFileSHA(t, p)
	pubs := e.sim.PublishesByHash()
	if pubs[stale] != 0 || pubs[fresh] != 1 {
		t.Errorf("publishes: stale content %d, current content %d; want 0 and 1", pubs[stale], pubs[fresh])
	}
}

// TestWorkerResolveHeldJob: a publish whose answer was lost (the splat was
// created) is held; the operator finds the splat and resolves the job with
// its id; the job polls it to done without publishing again.
func TestWorkerResolveHeldJob(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{Faults: apisim.Faults{UncertainPublishes: 1}})
	p := e.writePLY("lost-answer.ply", 77)
	e.enqueue(p)
	o := e.options(1)
	o.OnUncertain = UncertainHold
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	held := e.jobs()[0]
	splats := e.sim.Splats()
	if held.Stage != state.Held || len(splats) != 1 {
		t.Fatalf("job %s with %d splats on the server; want held and 1", held.Stage, len(splats))
	}
	if _, err := e.store.Resolve(held.ID, splats[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.jobs()[0]
	if j.Stage != state.Done || j.SplatID != splats[0].ID || j.ViewerURL != splats[0].URL || !j.Finalized {
		t.Errorf("resolved job: stage %s splat %q url %q finalized %v", j.Stage, j.SplatID, j.ViewerURL, j.Finalized)
	}
	if n := len(e.sim.Splats()); n != 1 {
		t.Errorf("%d splats on the server after resolve, want 1 (no new publish)", n)
	}
	if _, err := e.store.Resolve(j.ID, "x"); err == nil {
		t.Error("resolving a done job succeeded")
	}
}

// TestWorkerPublish429IsNotUncertain: a publish refused with 429 created
// nothing; the job goes back to uploaded, so a restart during its backoff
// finds nothing uncertain (no hold), and it is published once afterwards.
func TestWorkerPublish429IsNotUncertain(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{Faults: apisim.Faults{ErrorRate: map[string]float64{apisim.RoutePublish: 1}, ErrorStatus: 429}})
	p := e.writePLY("rate-limited.ply", 30)
	e.enqueue(p)
	o := e.options(1)
	o.OnUncertain = UncertainHold
	o.Timing.Patience[state.ProfileJob] = state.Patience{Backoff: state.Backoff{Base: time.Hour, Cap: time.Hour, Jitter: state.NoJitter}} // the retry waits past the restart
	pool, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pool.Run(ctx) }()
	e.waitFor("a publish refused with 429", func() bool {
		js := e.jobs()
		return len(js) == 1 && js[0].LastStatus == http.StatusTooManyRequests
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if j := e.jobs()[0]; j.Stage != state.Uploaded {
		t.Fatalf("after a 429 the job is %s, want uploaded", j.Stage)
	}
	e.sim.SetFaults(apisim.Faults{})
	e.reopen() // a restart: recovery marks publishing jobs uncertain
	if j := e.jobs()[0]; j.Uncertain {
		t.Fatal("a job refused with 429 was marked uncertain at restart")
	}
	o = e.options(1)
	// A new process has a new pacer: the old one still holds the class
	// after the 429s.
	c, err := api.NewClient(api.ClientOptions{BaseURL: e.sim.URL(), Token: e.sim.Token(), RootCAs: e.sim.CertPool(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o.Client = c
	o.OnUncertain = UncertainHold
	o.Now = func() time.Time { return time.Now().Add(2 * time.Hour) } // the backoff is over
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	if j := e.jobs()[0]; j.Stage != state.Done {
		t.Errorf("job %s (%s), want done", j.Stage, j.FailReason)
	}
	e.checkOnce(p)
}

// workerFlakyClaimStore fails its first Claims.
type workerFlakyClaimStore struct {
	*queue.Store
	fails atomic.Int32
	calls atomic.Int32
}

func (s *workerFlakyClaimStore) Claim(now time.Time) (state.Job, bool, error) {
	s.calls.Add(1)
	if s.fails.Add(-1) >= 0 {
		return state.Job{}, false, errors.New("disk I/O error")
	}
	return s.Store.Claim(now)
}

// TestWorkerStoreErrorClearsWhenIdle: /readyz must not report a store that
// failed once and works again, even when no job comes to prove it.
func TestWorkerStoreErrorClearsWhenIdle(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	fs := &workerFlakyClaimStore{Store: e.store}
	fs.fails.Store(1)
	o := e.options(1)
	o.Store = fs
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e.waitFor("a successful claim after the failed one", func() bool { return fs.calls.Load() >= 2 })
	e.waitFor("StoreError cleared", func() bool { return p.StoreError() == nil })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestWorkerStorageRefusalsBackOff: a storage that refuses every fresh
// signed URL is not hammered: the first two refusals sign again at once,
// the ones after them wait the retry rule's growing backoff (found against a real
// S3 that refused an unsigned header: 238 PUTs in a minute).
func TestWorkerStorageRefusalsBackOff(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{Faults: apisim.Faults{StorageForbiddenRate: 1}})
	e.enqueue(e.writePLY("refused.ply", 40))
	o := e.options(1)
	o.Timing.Patience[state.ProfileJob] = state.Patience{Backoff: state.Backoff{Base: time.Hour, Cap: time.Hour, Jitter: state.NoJitter}}
	p, err := NewPool(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	e.waitFor("a third refusal", func() bool {
		j, err := e.store.Get(1)
		return err == nil && j.Resigns >= 3
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	j, _ := e.store.Get(1)
	if wait := j.NextAttempt.Sub(j.UpdatedAt); j.Stage != state.Ready || wait < 59*time.Minute {
		t.Errorf("after %d refusals: stage %s, next attempt in %v; want ready and the backoff (1 h)", j.Resigns, j.Stage, wait)
	}
	if n := e.sim.Stats().Total(apisim.RouteStoragePut); n != 3 {
		t.Errorf("%d PUTs; want 3 (two re-signed at once, then the backoff)", n)
	}
}

// TestWorkerPollsAreNoAttempts: ATTEMPTS counts failed attempts in every
// stage: a job polled several times while processing shows 0, as it does
// once done. Before, each answered poll counted one.
func TestWorkerPollsAreNoAttempts(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{ProcessingDelay: 200 * time.Millisecond})
	p := e.writePLY("slow.ply", 30)
	e.enqueue(p)
	o := e.options(1)
	var polls, most atomic.Int32
	o.workerHook = func(point string, j state.Job) error {
		if point == "commit:processing" {
			polls.Add(1)
			if n := int32(j.Attempts); n > most.Load() {
				most.Store(n)
			}
		}
		return nil
	}
	if err := e.run(o); err != nil {
		t.Fatal(err)
	}
	j := e.job(p)
	if polls.Load() < 2 || most.Load() != 0 || j.Stage != state.Done || j.Attempts != 0 {
		t.Errorf("%d commits while processing, most attempts %d; job %s with %d attempts; want several polls, 0 attempts throughout", polls.Load(), most.Load(), j.Stage, j.Attempts)
	}
}

// TestWorkerForgetPublishesAgain: under legacy too, a forgotten job's
// content found again is published again, not taken for a duplicate.
func TestWorkerForgetPublishesAgain(t *testing.T) {
	t.Parallel()
	e := newWorkerEnv(t, apisim.Options{})
	p := e.writePLY("again.ply", 30)
	e.enqueue(p)
	if err := e.run(e.options(1)); err != nil {
		t.Fatal(err)
	}
	first := e.job(p)
	if _, err := e.store.Forget(first.ID); err != nil {
		t.Fatal(err)
	}
	e.enqueue(p)
	if err := e.run(e.options(1)); err != nil {
		t.Fatal(err)
	}
	j := e.job(p)
	if j.ID == first.ID || j.Stage != state.Done || j.DuplicateOf != 0 || j.SplatID == first.SplatID {
		t.Errorf("found again: job %d %s duplicate of %d, splat %s (first %s)", j.ID, j.Stage, j.DuplicateOf, j.SplatID, first.SplatID)
	}
	if n := e.sim.PublishesByHash()[workerFileSHA(t, p)]; n != 2 {
		t.Errorf("published %d times, want 2", n)
	}
}
