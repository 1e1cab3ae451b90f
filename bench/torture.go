package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/splatd/splatd/queue"
	"github.com/splatd/splatd/state"
	"github.com/splatd/splatd/uploader/after"
	"github.com/splatd/splatd/uploader/apisim"
)

// TortureOptions configures RunTorture.
type TortureOptions struct {
	Bin   string    // the splatd binary
	Dir   string    // work folder; each scenario gets a subfolder
	Quick bool      // fewer files and kills (the `go test` variant)
	Only  []string  // scenario names to run; empty = all
	Seed  uint64    // kill moments and fault draws; 0 = from the clock
	Log   io.Writer // progress lines; nil = discard
}

// Result is one scenario's verdict. The targets are the same for every
// scenario: every file published, none twice, none lost.
type Result struct {
	Scenario   string
	Files      int
	Published  int // files whose content the server published at least once
	Duplicates int // extra publishes of the same content, server side
	Lost       int // files not published, or with no done job or no receipt
	Skipped    string
	Notes      []string // what happened (kills, faults, 429s...)
	Problems   []string // further targets missed (the scenario's own checks)
	// Summary, when set, is the scenario's own verdict line, printed as is
	// after Line (hostile-folder's "attacks N, outside files read 0, ...").
	Summary string
	Elapsed time.Duration
}

// OK reports whether every target was met (a skipped scenario is not OK).
func (r Result) OK() bool {
	return r.Skipped == "" && r.Published == r.Files && r.Duplicates == 0 && r.Lost == 0 && len(r.Problems) == 0
}

// Line is the scenario's one-line summary:
// "scenario NAME published N duplicates D lost L".
func (r Result) Line() string {
	if r.Skipped != "" {
		return fmt.Sprintf("scenario %s skipped: %s", r.Scenario, r.Skipped)
	}
	verdict := "ok"
	if !r.OK() {
		verdict = "MISSED"
	}
	return fmt.Sprintf("scenario %s published %d duplicates %d lost %d  (of %d files; target all/0/0: %s; %s)",
		r.Scenario, r.Published, r.Duplicates, r.Lost, r.Files, verdict, r.Elapsed.Round(100*time.Millisecond))
}

type scenario struct {
	name string
	run  func(ctx context.Context, e *tenv) error
}

func scenarios() []scenario {
	return []scenario{
		{"sigkill", runKill},
		{"storage-faults", runStorageFaults},
		{"publish-5xx", runPublish5xx},
		{"url-expiry", runURLExpiry},
		{"neighbour-429", runNeighbour},
		{"disk-full", runDiskFull},
		{"token-401", runToken401},
		{"fresh-state", runFreshState},
		{"unremovable-move", runUnremovableMove},
		{"v1-sigkill", runV1Kill},
		{"strict-sigkill", runStrictKill},
		{"fleet", runFleet},
		{"fleet-tight", fullRunFleet(fleet3Tight)},
		{"hostile-folder", runHostileFolder},
		{"fleet-5", fullRunFleet(fleet5)},
		{"fleet-5-tight", fullRunFleet(fleet5Tight)},
		{"power-cut", runPowerCut},
		{"fleet-5-lost", fullRunFleet(fleet5Lost)},
		{"fleet-5-load", fullRunFleet(fleet5Load)},
	}
}

// ScenarioNames lists the scenarios in the order they are reported.
func ScenarioNames() []string {
	var out []string
	for _, s := range scenarios() {
		out = append(out, s.name)
	}
	return out
}

// RunTorture runs the scenarios concurrently (each has its own simulator,
// daemon and folders) and returns their results in a fixed order.
func RunTorture(ctx context.Context, o TortureOptions) []Result {
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	var logMu sync.Mutex
	logf := func(format string, a ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
	logf("torture: seed %d, work folder %s", o.Seed, o.Dir)
	var list []scenario
	for _, s := range scenarios() {
		if len(o.Only) == 0 || contains(o.Only, s.name) {
			list = append(list, s)
		}
	}
	results := make([]Result, len(list))
	var wg sync.WaitGroup
	for i, s := range list {
		wg.Go(func() {
			e := &tenv{o: o, name: s.name, dir: filepath.Join(o.Dir, s.name),
				rng: rand.New(rand.NewPCG(o.Seed, uint64(i+1))), logf: logf, seed: o.Seed + uint64(i)}
			start := time.Now()
			err := s.run(ctx, e)
			e.close()
			r := e.res
			r.Scenario, r.Elapsed = s.name, time.Since(start)
			var skip *skipError
			switch {
			case errors.As(err, &skip):
				r.Skipped = skip.reason
			case err != nil:
				r.Problems = append(r.Problems, "scenario error: "+err.Error())
			}
			results[i] = r
			logf("torture: %s finished in %s", s.name, r.Elapsed.Round(100*time.Millisecond))
		})
	}
	wg.Wait()
	return results
}

type skipError struct{ reason string }

func (e *skipError) Error() string { return "skipped: " + e.reason }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// tenv is one scenario's world: a simulator, a config, files, the daemon.
type tenv struct {
	o    TortureOptions
	name string
	dir  string
	rng  *rand.Rand
	seed uint64
	logf func(string, ...any)

	sim     *apisim.Server
	cfg     DaemonConfig
	cfgPath string
	logPath string
	d       *Daemon
	files   []string
	shas    map[string]string
	res     Result
	starts  int
}

func (e *tenv) note(format string, a ...any) {
	e.res.Notes = append(e.res.Notes, fmt.Sprintf(format, a...))
}

// unproven records a fault that did not happen: a missed target in the
// full run, a note in the quick one (whose few draws may all miss).
func (e *tenv) unproven(format string, a ...any) {
	if e.o.Quick {
		e.note("not exercised this time: "+format, a...)
		return
	}
	e.problem(format, a...)
}

func (e *tenv) problem(format string, a ...any) {
	e.res.Problems = append(e.res.Problems, fmt.Sprintf(format, a...))
}

// setup starts the simulator (with generous limits unless o says
// otherwise) and writes the daemon's config.
func (e *tenv) setup(so apisim.Options, cfg DaemonConfig) error {
	if err := os.MkdirAll(e.dir, 0o755); err != nil {
		return err
	}
	if so.Limits == nil {
		so.Limits = map[apisim.Class]int{apisim.ClassNormal: 100000, apisim.ClassStrict: 100000, apisim.ClassAssets: 100000}
	}
	if so.ProcessingDelay == 0 {
		so.ProcessingDelay = 60 * time.Millisecond
	}
	so.Seed = e.seed
	so.Dir = filepath.Join(e.dir, "sim")
	sim, err := apisim.New(so)
	if err != nil {
		return err
	}
	e.sim = sim
	cfg.Sim, cfg.Dir = sim, e.dir
	e.cfg = cfg
	e.cfgPath, err = e.cfg.Write()
	e.logPath = filepath.Join(e.dir, "splatd.log")
	e.shas = map[string]string{}
	return err
}

func (e *tenv) close() {
	if e.d != nil {
		select {
		case <-e.d.Done():
		default:
			e.d.Kill()
		}
	}
	if e.sim != nil {
		e.sim.Close()
	}
}

// writeFile drops sample i into the inbox and records its sha256.
func (e *tenv) writeFile(i, splats int) error {
	p := filepath.Join(e.cfg.Inbox, fmt.Sprintf("%s-%03d.ply", e.name, i))
	if err := WriteSample(p, fmt.Sprintf("%s %d %d", e.name, i, e.seed), splats); err != nil {
		return err
	}
	sum, err := FileSHA256(p)
	if err != nil {
		return err
	}
	e.files = append(e.files, p)
	e.shas[p] = sum
	return nil
}

func (e *tenv) writeFiles(from, n, splats int) error {
	for i := from; i < from+n; i++ {
		if err := e.writeFile(i, splats); err != nil {
			return err
		}
	}
	return nil
}

func (e *tenv) start() error {
	d, err := StartDaemon(e.o.Bin, e.cfgPath, e.logPath)
	if err != nil {
		return err
	}
	e.d = d
	e.starts++
	return nil
}

// stop ends the running daemon with SIGTERM; a non-zero exit is a problem.
func (e *tenv) stop() {
	if e.d == nil {
		return
	}
	select {
	case <-e.d.Done():
		return
	default:
	}
	if err := e.d.Stop(30 * time.Second); err != nil {
		e.problem("splatd did not stop cleanly on SIGTERM: %v", err)
	}
}

// receipts counts the files with a receipt, and those whose receipt says done.
func (e *tenv) receipts() (final, done int) {
	for _, p := range e.files {
		b, err := os.ReadFile(after.ReceiptPath(p))
		if err != nil {
			continue
		}
		var r after.Receipt
		if json.Unmarshal(b, &r) != nil {
			continue
		}
		final++
		if r.Status == "done" || r.Status == "duplicate" {
			done++
		}
	}
	return final, done
}

// waitFinal waits until every file has a receipt (its job is final) or the
// timeout passes; it returns false on timeout or when the daemon exits.
func (e *tenv) waitFinal(ctx context.Context, timeout time.Duration) bool {
	end := time.Now().Add(timeout)
	for time.Now().Before(end) && ctx.Err() == nil {
		if f, _ := e.receipts(); f == len(e.files) {
			return true
		}
		select {
		case <-e.d.Done():
			return false
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return false
}

// jobsOf lists the daemon's jobs through `splatd jobs -json` (the admin
// socket while it runs, the state file otherwise).
func (e *tenv) jobsOf(ctx context.Context, stage string) ([]jobView, error) {
	args := []string{"jobs", "-config", e.cfgPath, "-json"}
	if stage != "" {
		args = append(args, "-state", stage)
	}
	out, err := Splatd(ctx, e.o.Bin, args...)
	if err != nil {
		return nil, err
	}
	var views []jobView
	if err := json.Unmarshal(out, &views); err != nil {
		return nil, fmt.Errorf("splatd jobs -json: %w", err)
	}
	return views, nil
}

type jobView struct {
	ID          uint64     `json:"id"`
	File        string     `json:"file"`
	Stage       string     `json:"stage"`
	SHA256      string     `json:"sha256"`
	Error       string     `json:"error"`
	Adopted     bool       `json:"adopted"`
	AfterAction string     `json:"after_action"`
	AfterError  string     `json:"after_error"`
	NextAttempt *time.Time `json:"next_attempt"`
}

// verdict stops the daemon and checks, file by file: the server published
// its content exactly once (PublishesByHash), its job is done (or held with
// content the server confirms published), and its receipt exists. It also
// checks the state file's integrity (bbolt's own consistency check).
func (e *tenv) verdict() {
	e.stop()
	r := &e.res
	r.Files = len(e.files)
	if err := checkBolt(filepath.Join(e.cfg.StateDir, queue.FileName)); err != nil {
		e.problem("state file: %v", err)
	}
	store, err := queue.Open(e.cfg.StateDir, queue.Options{})
	if err != nil {
		e.problem("cannot open the state after the run: %v", err)
		r.Lost = len(e.files)
		return
	}
	defer store.Close()
	jobs, err := store.List(queue.Filter{})
	if err != nil {
		e.problem("cannot list jobs: %v", err)
	}
	byPath := map[string]state.Job{}
	stages := map[state.Stage]int{}
	for _, j := range jobs {
		stages[j.Stage]++
		if old, ok := byPath[j.Path]; ok {
			e.problem("two jobs for %s: %d (%s) and %d (%s)", filepath.Base(j.Path), old.ID, old.Stage, j.ID, j.Stage)
		}
		byPath[j.Path] = j
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
		j, ok := byPath[p]
		_, rerr := os.Stat(after.ReceiptPath(p))
		switch {
		case n == 0:
			r.Lost++
		case !ok:
			r.Lost++
			e.problem("%s: published but no job in the state", filepath.Base(p))
		case j.Stage != state.Done:
			r.Lost++
			e.problem("%s: job %d is %s (%s)", filepath.Base(p), j.ID, j.Stage, j.LastError+j.FailReason)
		case rerr != nil:
			r.Lost++
			e.problem("%s: no receipt", filepath.Base(p))
		}
	}
	st := e.sim.Stats()
	e.note("jobs by stage %s; server: %d signed URLs, %d uploads, %d publishes, %d 429s, %d 401s, %d injected faults; daemon started %d times",
		fmtStages(stages), st.SignedURLs, st.Uploads, st.Publishes, st.RateLimited, st.Unauthorized, st.Faults, e.starts)
}

func fmtStages(m map[state.Stage]int) string {
	var parts []string
	for _, s := range state.Stages {
		if m[s] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", s, m[s]))
		}
	}
	return strings.Join(parts, ",")
}

// checkBolt runs bbolt's consistency check over the state file read-only.
func checkBolt(path string) error {
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}

// count returns the quick or the full figure.
func (e *tenv) count(quick, full int) int {
	if e.o.Quick {
		return quick
	}
	return full
}

// basic runs the common shape: start, write files, wait, verdict.
func (e *tenv) basic(ctx context.Context, files, splats int, timeout time.Duration) error {
	if err := e.start(); err != nil {
		return err
	}
	if err := e.writeFiles(0, files, splats); err != nil {
		return err
	}
	if !e.waitFinal(ctx, timeout) {
		f, _ := e.receipts()
		e.problem("only %d of %d files finished within %s", f, files, timeout)
	}
	e.verdict()
	return nil
}

func (e *tenv) timeout() time.Duration {
	if e.o.Quick {
		return 90 * time.Second // make test runs it beside every -race package
	}
	return 150 * time.Second
}

// runStorageFaults: 30 % of PUTs answered 503, 10 % cut mid-upload by a
// connection reset, on files of 2.4 MB so that a reset lands mid-body. The
// full run allows 4 minutes (six bad PUTs in a row wait about two); the quick
// run halves the rates and allows 90 s.
func runStorageFaults(ctx context.Context, e *tenv) error {
	faults := apisim.Faults{StorageErrorRate: 0.30, StorageResetRate: 0.10}
	timeout := 4 * time.Minute
	if e.o.Quick {
		faults = apisim.Faults{StorageErrorRate: 0.15, StorageResetRate: 0.05}
		timeout = 90 * time.Second
	}
	if err := e.setup(apisim.Options{DiscardObjects: true, Faults: faults}, DaemonConfig{}); err != nil {
		return err
	}
	if err := e.basic(ctx, e.count(6, 20), 10000, timeout); err != nil {
		return err
	}
	st := e.sim.Stats()
	e.note("storage: %d PUTs answered 503, %d reset mid-upload, %d completed", st.Count(apisim.RouteStoragePut, 503), st.UploadResets, st.Uploads)
	if st.UploadResets == 0 || st.Count(apisim.RouteStoragePut, 503) == 0 {
		e.unproven("the faults did not happen (resets %d, 503s %d): the scenario proved nothing", st.UploadResets, st.Count(apisim.RouteStoragePut, 503))
	}
	return nil
}

// runPublish5xx: 20 % of publish calls answered 500 before doing anything.
func runPublish5xx(ctx context.Context, e *tenv) error {
	if err := e.setup(apisim.Options{Faults: apisim.Faults{ErrorRate: map[string]float64{apisim.RoutePublish: 0.20}}}, DaemonConfig{}); err != nil {
		return err
	}
	if err := e.basic(ctx, e.count(8, 30), 200, e.timeout()); err != nil {
		return err
	}
	st := e.sim.Stats()
	e.note("publish: %d answered 500, %d created", st.Count(apisim.RoutePublish, 500), st.Publishes)
	if st.Count(apisim.RoutePublish, 500) == 0 {
		e.unproven("no publish 5xx happened: the scenario proved nothing")
	}
	return nil
}

// runURLExpiry: signed URLs live 1 s (truncated to whole seconds by the
// simulator, so 0–1 s), every request takes 300 ms more, and 20 % of PUTs
// are refused as expired anyway: the daemon must sign again and upload.
func runURLExpiry(ctx context.Context, e *tenv) error {
	if err := e.setup(apisim.Options{URLExpiry: time.Second,
		Faults: apisim.Faults{Latency: 300 * time.Millisecond, StorageForbiddenRate: 0.20}}, DaemonConfig{}); err != nil {
		return err
	}
	// A bound on a stall, not a speed target (a passing run takes 5 to 15 s):
	// URLs that expire in a second back the retry rule off from 2 s, so on a
	// loaded machine, where most PUTs arrive late, seven refusals in a row
	// wait about four minutes, the quick run included.
	timeout := 300 * time.Second
	if err := e.basic(ctx, e.count(5, 16), 200, timeout); err != nil {
		return err
	}
	st := e.sim.Stats()
	e.note("storage: %d PUTs refused for an expired signature, %d refused by StorageForbiddenRate, %d signed URLs for %d files",
		st.StorageRefused, st.Count(apisim.RouteStoragePut, 403)-st.StorageRefused, st.SignedURLs, len(e.files))
	if st.Count(apisim.RouteStoragePut, 403) == 0 {
		e.unproven("no PUT was refused: the scenario proved nothing")
	}
	return nil
}

// runNeighbour: another machine shares the token. It spends 14 of the 20
// requests of every 2 s window up front (announced in the headers), and at
// random moments spends more (unannounced until our next response), now and
// then the whole window: a 429 storm.
func runNeighbour(ctx context.Context, e *tenv) error {
	const limit = 20
	if err := e.setup(apisim.Options{Window: 2 * time.Second,
		Limits: map[apisim.Class]int{apisim.ClassNormal: limit, apisim.ClassStrict: limit, apisim.ClassAssets: limit},
		Faults: apisim.Faults{Neighbour: map[apisim.Class]int{apisim.ClassNormal: 14}}}, DaemonConfig{}); err != nil {
		return err
	}
	stopN := make(chan struct{})
	var nwg sync.WaitGroup
	var spent, storms int
	nwg.Go(func() {
		// Bounded: at most 600 rounds of at most 1 s.
		rng := rand.New(rand.NewPCG(e.seed, 42))
		for range 600 {
			select {
			case <-stopN:
				return
			case <-time.After(time.Duration(200+rng.IntN(800)) * time.Millisecond):
			}
			n := 1 + rng.IntN(4)
			if rng.IntN(5) == 0 {
				n = limit
				storms++
			}
			e.sim.Consume(e.sim.Token(), apisim.ClassNormal, n)
			spent += n
		}
	})
	err := e.basic(ctx, e.count(4, 12), 200, e.timeout())
	close(stopN)
	nwg.Wait()
	if err != nil {
		return err
	}
	st := e.sim.Stats()
	e.note("neighbour spent 14/20 of every window plus %d requests at random moments (%d storms that emptied the window); the daemon got %d 429s",
		spent, storms, st.RateLimited)
	return nil
}

// runKill: files arrive one by one while the daemon is SIGKILLed at random
// moments and restarted each time. publish.on_uncertain is hold, since no
// client can resolve a kill between a legacy publish and the commit of its
// answer; the suite plays the operator (resolveHeld).
func runKill(ctx context.Context, e *tenv) error {
	if err := e.setup(apisim.Options{Faults: apisim.Faults{Latency: 30 * time.Millisecond}}, DaemonConfig{OnUncertain: "hold"}); err != nil {
		return err
	}
	files, minKills := e.count(12, 40), e.count(6, 24)
	stop, err := e.arrive(files, func(int) int { return 300 }, 400*time.Millisecond)
	if err != nil {
		return err
	}
	defer stop()
	if err := e.killLoop(ctx, minKills, 20*time.Millisecond, 520*time.Millisecond, time.Now().Add(e.timeout()/2)); err != nil {
		return err
	}
	if err := e.start(); err != nil {
		return err
	}
	if !e.waitFinal(ctx, e.timeout()/2) {
		f, _ := e.receipts()
		e.problem("only %d of %d files finished after the last restart", f, files)
	}
	if err := e.resolveHeld(ctx, 30*time.Second); err != nil {
		return err
	}
	e.verdict()
	return nil
}

// arrive makes the files in a staging folder first (file i with splats(i)
// splats), then moves them into the inbox one every `every`, whether the
// daemon lives or not. The returned stop ends the arrivals and waits for
// the mover.
func (e *tenv) arrive(files int, splats func(i int) int, every time.Duration) (stop func(), err error) {
	staging := filepath.Join(e.dir, "staging")
	if err := os.MkdirAll(staging, 0o755); err != nil {
		return nil, err
	}
	inbox := e.cfg.Inbox
	e.cfg.Inbox = staging
	for i := range files {
		if err := e.writeFile(i, splats(i)); err != nil {
			e.cfg.Inbox = inbox
			return nil, err
		}
	}
	e.cfg.Inbox = inbox
	var staged []string
	for i, p := range e.files {
		final := filepath.Join(inbox, filepath.Base(p))
		staged = append(staged, p)
		e.shas[final] = e.shas[p]
		e.files[i] = final
	}
	stopArrivals := make(chan struct{})
	arrived := make(chan error, 1)
	go func() {
		for i, p := range staged {
			if err := os.Rename(p, e.files[i]); err != nil {
				arrived <- err
				return
			}
			select {
			case <-stopArrivals:
				arrived <- errors.New("stopped before every file arrived")
				return
			case <-time.After(every):
			}
		}
		arrived <- nil
	}()
	return func() {
		close(stopArrivals)
		<-arrived
	}, nil
}

// killLoop starts the daemon and SIGKILLs it after a random delay in
// [minDelay, maxDelay), again and again, until minKills kills have landed
// while some file had no receipt yet (during ingest), or 4 × minKills
// kills in all, or the deadline. It leaves the daemon dead.
func (e *tenv) killLoop(ctx context.Context, minKills int, minDelay, maxDelay time.Duration, deadline time.Time) error {
	kills, during := 0, 0
	for kills < 4*minKills && during < minKills && time.Now().Before(deadline) && ctx.Err() == nil {
		if err := e.start(); err != nil {
			return err
		}
		delay := minDelay + time.Duration(e.rng.Int64N(int64(maxDelay-minDelay)))
		select {
		case <-e.d.Done():
			return fmt.Errorf("splatd exited on its own: %v", e.d.Err())
		case <-time.After(delay):
		}
		final, _ := e.receipts()
		e.d.Kill()
		if !KilledBySIGKILL(e.d.Err()) {
			return fmt.Errorf("splatd did not die of SIGKILL: %v", e.d.Err())
		}
		kills++
		if final < len(e.files) {
			during++
		}
	}
	e.note("%d SIGKILLs, %d of them during ingest (target >= %d)", kills, during, minKills)
	if during < minKills {
		e.problem("only %d kills landed during ingest (want >= %d)", during, minKills)
	}
	return nil
}

// resolveHeld is the operator's step for jobs held after an interrupted
// legacy publish (publish.on_uncertain: hold): a job whose content the
// server shows published is closed with that splat (`splatd resolve`,
// polled to done, not published again), the others are retried; all must
// be final within wait.
func (e *tenv) resolveHeld(ctx context.Context, wait time.Duration) error {
	held, err := e.jobsOf(ctx, "held")
	if err != nil {
		return err
	}
	splatOf := map[string]string{} // content sha256 → the splat the server made of it
	for _, sp := range e.sim.Splats() {
		splatOf[sp.ObjectSHA256] = sp.ID
	}
	confirmed, retried := 0, 0
	for _, j := range held {
		if id, ok := splatOf[j.SHA256]; ok {
			os.Remove(after.ReceiptPath(j.File)) // the resolved job writes a done one
			if _, err := Splatd(ctx, e.o.Bin, "resolve", "-config", e.cfgPath, fmt.Sprint(j.ID), id); err != nil {
				return err
			}
			confirmed++
			continue
		}
		os.Remove(after.ReceiptPath(j.File)) // the retried job writes a new one
		if _, err := Splatd(ctx, e.o.Bin, "retry", "-config", e.cfgPath, fmt.Sprint(j.ID)); err != nil {
			return err
		}
		retried++
	}
	if retried+confirmed > 0 && !e.waitFinal(ctx, wait) {
		e.problem("resolved or retried held jobs did not finish")
	}
	e.note("held after an interrupted publish: %d (resolved with the splat found on the server %d, retried %d)", len(held), confirmed, retried)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
