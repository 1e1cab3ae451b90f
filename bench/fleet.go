package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
)

// The fleet's window: completes (the call that makes a splat) are in the
// strict class; the other routes stay in the normal class.
const fleetWindow = 10 * time.Second

// A fleet scenario's size, account limits (per window) and targets.
type fleetSpec struct {
	daemons, files, quickFiles int
	strict, normal             int
	// max429 is the target for responses 429; negative: a note only.
	max429 int
	// maxTime is the target for the time over the limit's minimum.
	maxTime float64
	// maxCreates and maxRequests are the targets for session creates and
	// API requests per file; zero: a note only.
	maxCreates, maxRequests float64
	// lose SIGKILLs the last daemon, never restarted, once fleetLoseAt of
	// the files have a receipt.
	lose bool
	// load runs a busy loop per core beside the fleet.
	load bool
}

// fleetLoseAt is the share of files out when a lost daemon is killed.
const fleetLoseAt = 0.3

// The fleets of the figures, on the account of its report: 12
// completes (strict) and 288 other requests (normal) per 10 s; 3 daemons on
// 30 files and 5 on 60. -tight: a strict limit of 5 (fleet-5-tight is a
// stress figure: its 429s are noted). -lost: one daemon lost for good.
// -load: beside a busy loop per core.
var (
	fleet3      = fleetSpec{daemons: 3, files: 30, quickFiles: 10, strict: 12, normal: 288, max429: 3, maxTime: 1.1, maxCreates: 1.2, maxRequests: 8}
	fleet3Tight = fleetSpec{daemons: 3, files: 30, quickFiles: 10, strict: 5, normal: apisim.DefaultNormalLimit, max429: 3, maxTime: 1.3}
	fleet5      = fleetSpec{daemons: 5, files: 60, quickFiles: 10, strict: 12, normal: 288, max429: 5, maxTime: 1.3, maxCreates: 1.2, maxRequests: 8}
	fleet5Tight = fleetSpec{daemons: 5, files: 60, quickFiles: 10, strict: 5, normal: apisim.DefaultNormalLimit, max429: -1, maxTime: 1.3}
	fleet5Lost  = fleetSpec{daemons: 5, files: 60, quickFiles: 10, strict: 12, normal: 288, max429: 5, maxTime: 1.6, lose: true}
	fleet5Load  = fleetSpec{daemons: 5, files: 60, quickFiles: 10, strict: 12, normal: 288, max429: 5, maxTime: 1.3, maxCreates: 1.2, maxRequests: 8, load: true}
)

// The targets every fleet shares: completes per file (a peer takes the
// splat from the owner's receipt, not from a replayed complete), the body
// bytes storage read over the files' size, the time over the limit's
// minimum.
const (
	fleetMaxCompletesPerFile = 1.1
	fleetMaxBytesRatio       = 1.1
)

func runFleet(ctx context.Context, e *tenv) error { return runFleetOf(ctx, e, fleet3) }

// fullRunFleet is a fleet of the full run only. The quick run (make test)
// leaves them out: more daemons built with -race on a test machine, and
// fleet already runs the same code paths.
func fullRunFleet(spec fleetSpec) func(context.Context, *tenv) error {
	return func(ctx context.Context, e *tenv) error {
		if e.o.Quick {
			return &skipError{reason: "the full run's figure only (fleet covers the quick run)"}
		}
		return runFleetOf(ctx, e, spec)
	}
}

// runFleetOf runs spec's N daemons (own state and config, one token, v1
// on the strict simulator) on one shared folder that holds the files when
// they all start, and checks bench/README.md's fleet targets: each file
// published once, the 429s, completes, creates and requests per file, the
// time over the limit's minimum and the bytes storage read.
func runFleetOf(ctx context.Context, e *tenv, spec fleetSpec) error {
	rl := &requestLog{routes: map[string]bool{apisim.RouteV1Complete: true}}
	so := apisim.Options{Window: fleetWindow, PartSize: v1PartSizeTorture,
		Limits:  map[apisim.Class]int{apisim.ClassStrict: spec.strict, apisim.ClassNormal: spec.normal, apisim.ClassAssets: apisim.DefaultAssetsLimit},
		Classes: map[string]apisim.Class{apisim.RouteV1Complete: apisim.ClassStrict},
		Logger:  zerolog.New(rl).Level(zerolog.DebugLevel)}
	if err := e.setup(so, DaemonConfig{Protocol: "v1", ParallelParts: 4}); err != nil {
		return err
	}
	files, total, err := e.writeFleetFiles(spec)
	if err != nil {
		return err
	}
	cfgs, states, err := e.fleetConfigs(spec)
	if err != nil {
		return err
	}
	daemons := make([]*Daemon, len(cfgs))
	defer func() {
		for _, d := range daemons[1:] {
			if d != nil {
				d.Kill()
			}
		}
	}()
	for i, cfg := range cfgs {
		d, err := StartDaemon(e.o.Bin, cfg, filepath.Join(filepath.Dir(cfg), "splatd.log"))
		if err != nil {
			return err
		}
		daemons[i] = d
		if i == 0 {
			e.d, e.starts = d, 1
		}
	}
	if spec.load {
		defer cpuHog()()
	}
	lost, lostNote := -1, make(chan string, 1)
	if spec.lose {
		lost = len(daemons) - 1
		go func() { lostNote <- e.loseAt(ctx, daemons[lost], int(fleetLoseAt*float64(files))) }()
	}
	minimum := time.Duration((files+spec.strict-1)/spec.strict-1) * fleetWindow
	if !e.waitFinal(ctx, 4*minimum+time.Minute) {
		f, _ := e.receipts()
		e.problem("only %d of %d files have a receipt", f, files)
	}
	finished := time.Now()
	rl.mu.Lock()
	var first time.Time
	if len(rl.times) > 0 {
		first = rl.times[0]
	}
	rl.mu.Unlock()
	perWindow := rl.windows(fleetWindow)
	// Every daemon's own job for every file must end too (a daemon that
	// found a peer's session watches it, then sees it completed).
	if lost >= 0 {
		select {
		case n := <-lostNote:
			e.note("%s", n)
		default:
			e.problem("the daemon to lose was never killed")
		}
		cfgs, states, daemons = slices.Delete(cfgs, lost, lost+1), slices.Delete(states, lost, lost+1), slices.Delete(daemons, lost, lost+1)
	}
	allDone := e.waitFleetJobs(ctx, cfgs, time.Minute)
	e.stopFleet(daemons)
	e.fleetVerdict(states)
	if !allDone {
		e.problem("not every daemon's job of every file was done within a minute of the last receipt")
	}
	e.fleetFigures(spec, files, total)
	if first.IsZero() {
		e.problem("no complete was made")
		return nil
	}
	e.note("completes per window (answered@start s), as the simulator opens them: %v (full: %d each)", perWindow, spec.strict)
	took := finished.Sub(first)
	ratio := took.Seconds() / minimum.Seconds()
	e.note("fleet figure: time %.3f x the limit's minimum: first complete to last receipt %s, minimum %s = (ceil(%d/%d)-1) x %s (target <= %.1f)",
		ratio, took.Round(100*time.Millisecond), minimum, files, spec.strict, fleetWindow, spec.maxTime)
	if ratio > spec.maxTime && !e.o.Quick {
		e.problem("the fleet took %.3f x the limit's minimum (target <= %.1f)", ratio, spec.maxTime)
	}
	return nil
}

// writeFleetFiles writes the scenario's files into the shared inbox and
// returns how many and their total size.
func (e *tenv) writeFleetFiles(spec fleetSpec) (files int, total int64, err error) {
	files = e.count(spec.quickFiles, spec.files)
	for i := range files {
		if err := e.writeFile(i, v1Splats(i)); err != nil {
			return 0, 0, err
		}
	}
	for _, p := range e.files {
		fi, err := os.Stat(p)
		if err != nil {
			return 0, 0, err
		}
		total += fi.Size()
	}
	return files, total, nil
}

// fleetConfigs returns every daemon's config file and state dir: daemon 1
// is the scenario's own (e.cfg), the peers share its inbox, each with its
// own state.
func (e *tenv) fleetConfigs(spec fleetSpec) (cfgs, states []string, err error) {
	cfgs, states = []string{e.cfgPath}, []string{e.cfg.StateDir}
	for i := 2; i <= spec.daemons; i++ {
		c := DaemonConfig{Sim: e.sim, Dir: filepath.Join(e.dir, fmt.Sprintf("peer-%d", i)), Inbox: e.cfg.Inbox, Protocol: "v1", ParallelParts: 4}
		p, err := c.Write()
		if err != nil {
			return nil, nil, err
		}
		cfgs, states = append(cfgs, p), append(states, c.StateDir)
	}
	return cfgs, states, nil
}

// stopFleet stops every daemon with SIGTERM; one that does not stop
// cleanly, or logged errors, is a problem of the scenario.
func (e *tenv) stopFleet(daemons []*Daemon) {
	for i, d := range daemons {
		if err := d.Stop(30 * time.Second); err != nil {
			e.problem("daemon %d did not stop cleanly on SIGTERM: %v", i+1, err)
		}
		if errs := d.Errors(); len(errs) > 0 {
			e.problem("daemon %d logged %d errors, first: %s", i+1, len(errs), errs[0])
		}
	}
}

// fleetFigures prints the fleet's 429s, completes per file and bytes to
// storage from the simulator's counts, each against its target.
func (e *tenv) fleetFigures(spec fleetSpec, files int, total int64) {
	st := e.sim.Stats()
	received, _, _ := sessionTotals(st)
	sent := received + st.UploadBytes
	bytesRatio := float64(sent) / float64(total)
	perFile := float64(st.Completes+st.CompleteReplays) / float64(files)
	e.note("%d daemons, one token, one folder of %d files (%.1f MB): %d sessions, %d creates + %d replays, %d completes + %d replays, %d splats",
		spec.daemons, files, float64(total)/1e6, len(e.sim.Sessions()), st.Creates, st.CreateReplays, st.Completes, st.CompleteReplays, st.V1Splats)
	if spec.max429 < 0 {
		e.note("fleet figure: 429s %d (noted, no target)", st.RateLimited)
	} else {
		e.note("fleet figure: 429s %d (target <= %d)", st.RateLimited, spec.max429)
	}
	e.note("fleet figure: completes per file %.3f (target <= %.1f)", perFile, fleetMaxCompletesPerFile)
	e.note("fleet figure: bytes to storage %.3f x the files' size, %.1f MB (target <= %.1f); %d part PUTs of a part already held",
		bytesRatio, float64(sent)/1e6, fleetMaxBytesRatio, partsResent(st))
	if spec.max429 >= 0 && st.RateLimited > spec.max429 {
		e.problem("%d responses 429 across the fleet (target <= %d)", st.RateLimited, spec.max429)
	}
	creates := float64(st.Creates+st.CreateReplays) / float64(files)
	requests := float64(apiRequests(st)) / float64(files)
	e.note("fleet figure: session creates per file %.3f (%s); API requests per file %.2f (%s)",
		creates, fleetTarget(spec.maxCreates), requests, fleetTarget(spec.maxRequests))
	if spec.maxCreates > 0 && creates > spec.maxCreates {
		e.problem("%.3f session creates per file across the fleet (target <= %.1f)", creates, spec.maxCreates)
	}
	if spec.maxRequests > 0 && requests > spec.maxRequests {
		e.problem("%.2f API requests per file across the fleet (target <= %.0f)", requests, spec.maxRequests)
	}
	if perFile > fleetMaxCompletesPerFile {
		e.problem("%.3f completes per file across the fleet (target <= %.1f)", perFile, fleetMaxCompletesPerFile)
	}
	if bytesRatio > fleetMaxBytesRatio {
		e.problem("storage read %.3f x the files' size across the fleet (target <= %.1f)", bytesRatio, fleetMaxBytesRatio)
	}
}

// waitFleetJobs polls each daemon's jobs (`splatd jobs -json`) once a
// second until every one of them is done, or timeout.
func (e *tenv) waitFleetJobs(ctx context.Context, cfgs []string, timeout time.Duration) bool {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) && ctx.Err() == nil {
		done := 0
		for _, cfg := range cfgs {
			out, err := Splatd(ctx, e.o.Bin, "jobs", "-config", cfg, "-json", "-state", "done")
			if err != nil {
				break
			}
			if n, ok := countJSONArray(out); ok && n >= len(e.files) {
				done++
			}
		}
		if done == len(cfgs) {
			return true
		}
		sleepCtx(ctx, time.Second)
	}
	return false
}

// countJSONArray returns the length of a JSON array.
func countJSONArray(b []byte) (int, bool) {
	var a []json.RawMessage
	if json.Unmarshal(b, &a) != nil {
		return 0, false
	}
	return len(a), true
}

// fleetVerdict is verdict for several state directories: the server
// published each content once; each state passes bbolt's check and holds
// one job per file, done; each file has a receipt.
func (e *tenv) fleetVerdict(states []string) {
	r := &e.res
	r.Files = len(e.files)
	lost := map[string]bool{}
	for i, dir := range states {
		if err := checkBolt(filepath.Join(dir, queue.FileName)); err != nil {
			e.problem("daemon %d's state file: %v", i+1, err)
		}
		store, err := queue.Open(dir, queue.Options{})
		if err != nil {
			e.problem("cannot open daemon %d's state after the run: %v", i+1, err)
			continue
		}
		jobs, err := store.List(queue.Filter{})
		store.Close()
		if err != nil {
			e.problem("cannot list daemon %d's jobs: %v", i+1, err)
		}
		byPath := map[string]state.Job{}
		stages := map[state.Stage]int{}
		for _, j := range jobs {
			stages[j.Stage]++
			if _, dup := byPath[j.Path]; dup {
				e.problem("daemon %d has two jobs for %s", i+1, filepath.Base(j.Path))
			}
			byPath[j.Path] = j
		}
		for _, p := range e.files {
			switch j, ok := byPath[p]; {
			case !ok:
				lost[p] = true
				e.problem("daemon %d has no job for %s", i+1, filepath.Base(p))
			case j.Stage != state.Done:
				lost[p] = true
				e.problem("daemon %d: %s is %s (%s)", i+1, filepath.Base(p), j.Stage, j.LastError+j.FailReason)
			}
		}
		e.note("daemon %d: jobs by stage %s", i+1, fmtStages(stages))
	}
	pubs := e.sim.PublishesByHash()
	for _, p := range e.files {
		n := pubs[e.shas[p]]
		if n > 1 {
			r.Duplicates += n - 1
		}
		if n >= 1 {
			r.Published++
		}
		if _, err := os.Stat(after.ReceiptPath(p)); err != nil {
			lost[p] = true
		}
		if n == 0 || lost[p] {
			r.Lost++
		}
	}
}

// fleetTarget names a per-file target, or none.
func fleetTarget(max float64) string {
	if max <= 0 {
		return "noted, no target"
	}
	return fmt.Sprintf("target <= %g", max)
}

// apiRequests counts the API's answers (every v1 route but the part PUTs
// to storage).
func apiRequests(st apisim.Stats) int {
	n := 0
	for route, byStatus := range st.Requests {
		if !strings.HasPrefix(route, "v1_") || route == apisim.RoutePartPut {
			continue
		}
		for _, c := range byStatus {
			n += c
		}
	}
	return n
}

// loseAt SIGKILLs d, for good, once n files have a receipt, and says when.
func (e *tenv) loseAt(ctx context.Context, d *Daemon, n int) string {
	for ctx.Err() == nil {
		if f, _ := e.receipts(); f >= n {
			d.Kill()
			return fmt.Sprintf("lost daemon (pid %d): SIGKILLed with %d of %d files out, never restarted", d.cmd.Process.Pid, f, len(e.files))
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return "lost daemon: never killed (the run ended first)"
}

// cpuHog runs a busy loop on every core until the returned stop is called.
func cpuHog() (stop func()) {
	var done atomic.Bool
	for range runtime.NumCPU() {
		go func() {
			for n := 0; !done.Load(); n++ {
			}
		}()
	}
	return func() { done.Store(true) }
}
