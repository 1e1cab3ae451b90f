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

// TestV1CrashChild is the daemon half of TestV1SIGKILL (the v1 protocol):
// re-executed as a child process it enqueues the folder, runs the pool and
// exits 0 once every job is final. Skipped unless run as that child.
func TestV1CrashChild(t *testing.T) {
	if os.Getenv(crashEnvChild) != "v1" {
		t.Skip("only runs as the child process of TestV1SIGKILL")
	}
	if err := v1CrashChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

func v1CrashChild() error {
	ca, err := os.ReadFile(os.Getenv(crashEnvCA))
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca)
	client, err := api.NewClient(api.ClientOptions{BaseURL: os.Getenv(crashEnvURL), Token: os.Getenv(crashEnvToken), RootCAs: roots, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	store, err := queue.Open(os.Getenv(crashEnvState), queue.Options{LockTimeout: 10 * time.Second, DedupeWait: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	defer store.Close()
	root := os.Getenv(crashEnvFiles)
	ents, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	var cands []queue.Candidate
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return err
		}
		cands = append(cands, queue.Candidate{Path: filepath.Join(root, e.Name()), Root: root, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := store.EnqueueBatch(ctx, cands); err != nil {
		return err
	}
	p, err := NewPool(PoolOptions{
		Store: store, Client: client, Workers: 3, Protocol: ProtocolV1, ParallelParts: 4,
		Files: SidecarFiles{Publish: state.PublishParams{Title: "{{.Stem}}"}},
		Timing: Timing{
			Poll: PollOptions{Interval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond, Timeout: time.Minute}, Settle: 5 * time.Millisecond, PeerWait: time.Hour,
			Patience: map[state.Profile]state.Patience{
				state.ProfileJob:  {Backoff: state.Backoff{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: state.EqualJitter}},
				state.ProfilePart: {Backoff: state.Backoff{Base: 5 * time.Millisecond, Cap: 50 * time.Millisecond, Jitter: state.EqualJitter}},
			},
		},
		Logger:   zerolog.New(os.Stderr).Level(zerolog.ErrorLevel),
		Observer: NopObserver{},
	})
	if err != nil {
		return err
	}
	runc := make(chan error, 1)
	go func() { runc <- p.Run(ctx) }()
	fmt.Println("running")
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

// TestV1SIGKILL kills a child process publishing a folder of multi-part
// files under v1 with SIGKILL at random moments, while the simulator
// answers 20 % of creates and 30 % of completes with 502 after committing
// them. At the end every file is published once, with no operator step:
// under v1 nothing is uncertain. A fast machine that finishes before the
// planned kills ends the killing early; it is not a failure.
func TestV1SIGKILL(t *testing.T) {
	if os.Getenv(crashEnvChild) != "" {
		t.Skip("child")
	}
	files, kills := 24, 12
	if testing.Short() {
		files, kills = 8, 4
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	sim, err := apisim.New(apisim.Options{ProcessingDelay: 60 * time.Millisecond, Seed: seed | 1, PartSize: v1PartSize,
		Limits: map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000},
		Faults: apisim.Faults{Latency: 15 * time.Millisecond, UncertainCreateRate: 0.2, UncertainCompleteRate: 0.3}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	e := &workerEnv{t: t, sim: sim, stateDir: t.TempDir(), files: t.TempDir()}
	var paths []string
	var total int64
	for i := range files {
		// 1 to 6 parts each, every file its own content.
		p := e.writePLY(fmt.Sprintf("capture-%02d.ply", i), ((1+i%6)*v1PartSize-v1PartSize/2)/(62*4)-i)
		paths = append(paths, p)
		total += fileSize(t, p)
	}
	env := append(os.Environ(), crashEnvChild+"=v1", crashEnvState+"="+e.stateDir, crashEnvFiles+"="+e.files,
		crashEnvURL+"="+sim.URL(), crashEnvCA+"="+sim.CAFile(), crashEnvToken+"="+sim.Token())
	rng := rand.New(rand.NewPCG(seed, 2))

	start := func() (*exec.Cmd, chan error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestV1CrashChild$", "-test.count=1")
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
		<-running
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, done
	}

	started := time.Now()
	killed, finished := 0, false
	var stages []string
	for killed < kills && !finished {
		cmd, done := start()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("child failed: %v", err)
			}
			finished = true
			continue
		case <-time.After(100*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))):
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := <-done
		var ee *exec.ExitError
		switch {
		case err == nil:
			finished = true
		case errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
			killed++
			stages = append(stages, e.snapshot())
		default:
			t.Fatalf("child did not die of SIGKILL: %v", err)
		}
	}
	if !finished {
		cmd, done := start()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("final child: %v", err)
			}
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			t.Fatalf("final child did not finish: %s", e.snapshot())
		}
	}

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
	var received int64
	for _, ss := range st.Sessions {
		received += ss.BytesReceived
	}
	t.Logf("v1 SIGKILL: %d files (%d bytes), %d kills in %s; published %d/%d, duplicates %d, lost %d; jobs %v",
		files, total, killed, time.Since(started).Round(time.Millisecond), published, files, duplicates, lost, perStage)
	t.Logf("server: %d sessions (%d create replays), %d completes (%d replays), %d faults; storage received %d bytes (%.2f× the files)",
		st.Creates, st.CreateReplays, st.Completes, st.CompleteReplays, st.Faults, received, float64(received)/float64(total))
	t.Logf("stage counts at each kill: %s", strings.Join(stages, " | "))
	if published != files || duplicates != 0 || lost != 0 || len(jobs) != files || perStage[state.Done] != files {
		t.Errorf("published %d/%d, duplicates %d, lost %d, jobs %d (%v)", published, files, duplicates, lost, len(jobs), perStage)
	}
	if st.V1Splats != files {
		t.Errorf("server created %d splats for %d files", st.V1Splats, files)
	}
}
