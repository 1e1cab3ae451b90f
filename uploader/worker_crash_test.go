package uploader

import (
	"bufio"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/api"
	"github.com/splatd/splatd/uploader/apisim"
)

// Environment of the child process of TestWorkerSIGKILL.
const (
	crashEnvChild = "SPLATD_CRASH_CHILD"
	crashEnvState = "SPLATD_CRASH_STATE"
	crashEnvFiles = "SPLATD_CRASH_FILES"
	crashEnvURL   = "SPLATD_CRASH_URL"
	crashEnvCA    = "SPLATD_CRASH_CA"
	crashEnvToken = "SPLATD_CRASH_TOKEN"
)

// TestWorkerCrashChild is the daemon half of TestWorkerSIGKILL: re-executed
// as a child process, it opens the store, enqueues the folder (idempotent),
// runs the pool and exits 0 once every job is final. The parent kills it
// with SIGKILL at random moments. Skipped unless run as that child.
func TestWorkerCrashChild(t *testing.T) {
	if os.Getenv(crashEnvChild) != "1" {
		t.Skip("only runs as the child process of TestWorkerSIGKILL")
	}
	if err := crashChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func crashChild() error {
	ca, err := os.ReadFile(os.Getenv(crashEnvCA))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client, err := api.NewClient(api.ClientOptions{BaseURL: os.Getenv(crashEnvURL), Token: os.Getenv(crashEnvToken), RootCAs: pool, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	store, err := queue.Open(os.Getenv(crashEnvState), queue.Options{LockTimeout: 10 * time.Second, DedupeWait: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	defer store.Close()
	// The watcher's startup scan, reduced to its effect on the queue.
	var cands []queue.Candidate
	root := os.Getenv(crashEnvFiles)
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return err
		}
		cands = append(cands, queue.Candidate{Path: filepath.Join(root, e.Name()), Root: root, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Enqueue file by file from two goroutines, like a watcher racing a
	// rescan: a kill can land between any two enqueues.
	half := len(cands) / 2
	errc := make(chan error, 2)
	for _, part := range [][]queue.Candidate{cands[:half], cands[half:]} {
		go func() {
			for _, c := range part {
				if _, err := store.EnqueueBatch(ctx, []queue.Candidate{c}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	p, err := NewPool(PoolOptions{
		Store: store, Client: client, Workers: 3,
		Files:       SidecarFiles{Publish: state.PublishParams{Title: "{{.Stem}}", Format: "sog"}},
		OnUncertain: UncertainHold,
		Timing: Timing{
			Poll: PollOptions{Interval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond, Timeout: time.Minute}, Settle: 5 * time.Millisecond,
			Patience: map[state.Profile]state.Patience{
				state.ProfileJob:  {Backoff: state.Backoff{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: state.EqualJitter}},
				state.ProfilePart: {Backoff: state.Backoff{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: state.EqualJitter}},
			},
		},
		Logger: zerolog.New(os.Stderr).Level(zerolog.ErrorLevel),
	})
	if err != nil {
		return err
	}
	runc := make(chan error, 1)
	go func() { runc <- p.Run(ctx) }()
	fmt.Println("running")
	for range 2 {
		if err := <-errc; err != nil {
			return err
		}
	}
	p.Wake()
	for {
		select {
		case err := <-runc:
			return fmt.Errorf("pool stopped: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
		st, err := store.Stats()
		if err != nil {
			return err
		}
		if st.Jobs == len(cands) && st.Stages[state.Done]+st.Stages[state.Failed]+st.Stages[state.Held] == st.Jobs {
			cancel()
			return <-runc
		}
	}
}

// TestWorkerSIGKILL is the end-to-end proof of "exactly once through
// crashes": a child process running the store and the pool against the
// simulator (which runs here, in the parent, and counts publishes per
// content hash) is killed with SIGKILL at random moments during a 40-file
// ingest and restarted each time. At the end every file must be published
// once: no duplicate, none lost.
//
// The child uses publish.on_uncertain: hold, because a kill that lands
// after the API created the splat and before the commit of its id cannot
// be resolved by any client (the API has no idempotency key and no lookup
// by storage key); republishing there would risk a duplicate. The test then
// plays the operator for held jobs, as `splatd retry` would be used:
// published content is confirmed, unpublished content retried.
func TestWorkerSIGKILL(t *testing.T) {
	if os.Getenv(crashEnvChild) == "1" {
		t.Skip("child")
	}
	files, minKills := 40, 20
	if testing.Short() {
		files, minKills = 12, 5
	}
	// Generous rate limits: the pacer would otherwise spread the default
	// 240/min over the window and the test would mostly kill jobs waiting
	// for it.
	sim, err := apisim.New(apisim.Options{ProcessingDelay: 60 * time.Millisecond, Seed: 11,
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000},
		Faults: apisim.Faults{Latency: 25 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	e := &workerEnv{t: t, sim: sim, stateDir: t.TempDir(), files: t.TempDir()}
	var paths []string
	for i := range files {
		paths = append(paths, e.writePLY(fmt.Sprintf("capture-%02d.ply", i), 300+i))
	}
	env := append(os.Environ(), crashEnvChild+"=1", crashEnvState+"="+e.stateDir, crashEnvFiles+"="+e.files,
		crashEnvURL+"="+sim.URL(), crashEnvCA+"="+sim.CAFile(), crashEnvToken+"="+sim.Token())
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SPLATD_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("kill delays from seed %d (SPLATD_CRASH_SEED=%d reruns them)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	// start runs the child until it prints "running"; it returns the
	// command and a channel closed when it has exited.
	start := func() (*exec.Cmd, chan error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerCrashChild$", "-test.count=1")
		cmd.Env = env
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		running := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if strings.TrimSpace(sc.Text()) == "running" {
					close(running)
					for sc.Scan() {
					}
					return
				}
			}
			close(running)
		}()
		select {
		case <-running:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatal("child did not start within 30 s")
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done
	}

	started := time.Now()
	kills, earlyExits := 0, 0
	var stages []string
	// A fast machine may finish the ingest before minKills kills: that is
	// not a failure (exactly-once is checked below all the same), only
	// fewer crash points were tried; the count is logged.
kill:
	for kills < minKills {
		cmd, done := start()
		// A random moment within the child's life: hashing, signing,
		// mid-PUT, around the publish, polling, committing.
		delay := time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("child failed: %v", err)
			}
			earlyExits++
			break kill
		case <-time.After(delay):
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := <-done
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			if err == nil {
				earlyExits++
				break kill // finished just before the signal
			}
			t.Fatalf("child did not die of SIGKILL: %v", err)
		}
		kills++
		stages = append(stages, e.snapshot())
	}
	t.Logf("%d kills before the ingest finished (%d wanted)", kills, minKills)
	// Let the last run finish, then act as the operator for held jobs.
	var held, confirmed, retried int
	for round := 0; ; round++ {
		cmd, done := start()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("final child: %v", err)
			}
		case <-time.After(45 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("final child did not finish within 45 s: %s", e.snapshot())
		}
		store, err := queue.Open(e.stateDir, queue.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hs, err := store.List(queue.Filter{Stages: []state.Stage{state.Held}})
		if err != nil {
			t.Fatal(err)
		}
		pubs := sim.PublishesByHash()
		pending := 0
		for _, j := range hs {
			if round == 0 {
				held++
			}
			if pubs[j.SHA256] > 0 {
				continue // published before the kill: nothing to do
			}
			if _, err := store.Retry(j.ID); err != nil {
				t.Fatal(err)
			}
			retried++
			pending++
		}
		if round == 0 {
			confirmed = held - pending
		}
		store.Close()
		if pending == 0 || round > 3 {
			break
		}
	}

	// The verdict, server side.
	store, err := queue.Open(e.stateDir, queue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	jobs, err := store.List(queue.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	pubs := sim.PublishesByHash()
	published, duplicates, lost := 0, 0, 0
	for _, p := range paths {
		switch n := pubs[workerFileSHA(t, p)]; {
		case n == 0:
			lost++
		case n > 1:
			duplicates += n - 1
			published++
		default:
			published++
		}
	}
	perStage := map[state.Stage]int{}
	for _, j := range jobs {
		perStage[j.Stage]++
	}
	st := sim.Stats()
	t.Logf("SIGKILL test: %d files, %d kills (+%d early exits) in %s; published %d/%d, duplicates %d, lost %d",
		files, kills, earlyExits, time.Since(started).Round(time.Millisecond), published, files, duplicates, lost)
	t.Logf("jobs by stage %v; held by an uncertain publish %d (confirmed published %d, retried %d); server: %d signed URLs, %d uploads, %d publishes",
		perStage, held, confirmed, retried, st.SignedURLs, st.Uploads, st.Publishes)
	t.Logf("stage counts at each kill: %s", strings.Join(stages, " | "))
	if published != files || duplicates != 0 || lost != 0 || len(jobs) != files {
		t.Errorf("published %d/%d, duplicates %d, lost %d, jobs %d", published, files, duplicates, lost, len(jobs))
	}
	if st.Publishes != files {
		t.Errorf("server created %d splats for %d files", st.Publishes, files)
	}
}

// snapshot summarises the store's stages right after a kill (proof that
// kills landed across the pipeline).
func (e *workerEnv) snapshot() string {
	s, err := queue.Open(e.stateDir, queue.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	st, err := s.Stats()
	if err != nil {
		e.t.Fatal(err)
	}
	var parts []string
	for _, stg := range state.Stages {
		if n := st.Stages[stg]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", stg, n))
		}
	}
	return strings.Join(parts, ",")
}
